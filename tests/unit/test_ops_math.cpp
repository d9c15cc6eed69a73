// The shared element functions of kernels/ops_math.h (used by the CPU ops table and the CUDA
// ops kernels) against fp64 references written here, one test each. Tolerances are fp32's:
// a few ulps for single formulas, 4 ulps plus the 2-ulp exp_f for the ones that call it.
#include "kernels/ops_math.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

namespace {

using namespace dscpp::hd;

// |got − want| ≤ rel·|want| + abs.
bool close(double got, double want, double rel, double abs = 0.0) {
  return std::fabs(got - want) <= rel * std::fabs(want) + abs;
}

std::vector<float> inputs(float lo, float hi, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

constexpr double kUlp = std::numeric_limits<float>::epsilon();

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double c = std::sqrt(2 / std::numbers::pi), u = c * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

}  // namespace

TEST_CASE("exp_f: within 3 ulp of exp over its range, clamped outside", "[ops_math]") {
  for (float x : inputs(-87.0f, 88.0f, 20000, 1)) CHECK(close(exp_f(x), std::exp(double(x)), 3 * kUlp));
  CHECK(exp_f(0.0f) == 1.0f);
  CHECK(exp_f(-1000.0f) > 0.0f);  // clamped to a normal float, never 0
  CHECK(std::isfinite(exp_f(1000.0f)));
}

TEST_CASE("gelu and gelu_grad match the tanh-form GELU and its derivative", "[ops_math]") {
  for (float x : inputs(-10.0f, 10.0f, 20000, 2)) {
    INFO("x = " << x);
    // Where gelu crosses 0 (x near 0) the relative error is unbounded; use an absolute floor.
    CHECK(close(gelu(x), gelu_ref(x), 8 * kUlp, 1e-7));
    CHECK(close(gelu_grad(x), gelu_grad_ref(x), 16 * kUlp, 1e-6));
  }
  CHECK(gelu(0.0f) == 0.0f);
  CHECK(gelu(-80.0f) == Approx(0.0f).margin(1e-30));
  CHECK(gelu_grad(0.0f) == 0.5f);
}

TEST_CASE("layer norm element formulas reproduce an fp64 row layer norm and its backward", "[ops_math]") {
  for (int n : {1, 7, 64, 1000}) {
    const auto x = inputs(-3.0f, 5.0f, n, 3), g = inputs(0.5f, 1.5f, n, 4), b = inputs(-1.0f, 1.0f, n, 5),
               dy = inputs(-1.0f, 1.0f, n, 6);
    const float eps = 1e-5f, inv_n = 1.0f / float(n);
    double mref = 0, vref = 0;
    for (float v : x) mref += v;
    mref /= n;
    for (float v : x) vref += (v - mref) * (v - mref);
    vref /= n;
    const double rsref = 1 / std::sqrt(vref + eps);

    float s = 0, sq = 0;
    for (float v : x) s += v;
    const float m = s * inv_n;
    for (float v : x) sq += layernorm_sq_dev(v, m);
    const float rs = layernorm_rstd(sq, inv_n, eps);
    CHECK(close(rs, rsref, 1e-5));

    // Backward reference: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·gamma, in fp64.
    double mg = 0, mgx = 0;
    float fmg = 0, fmgx = 0;
    for (int i = 0; i < n; ++i) {
      const double xh = (x[i] - mref) * rsref;
      mg += dy[i] * double(g[i]);
      mgx += dy[i] * double(g[i]) * xh;
      fmg += dy[i] * g[i];
      fmgx += dy[i] * g[i] * layernorm_xhat(x[i], m, rs);
    }
    mg /= n, mgx /= n, fmg *= inv_n, fmgx *= inv_n;
    for (int i = 0; i < n; ++i) {
      INFO("n = " << n << ", i = " << i);
      const double xh = (x[i] - mref) * rsref;
      CHECK(close(layernorm_out(x[i], m, rs, g[i], b[i]), xh * g[i] + b[i], 1e-5, 1e-5));
      CHECK(
          close(layernorm_dx(dy[i], x[i], g[i], m, rs, fmg, fmgx), rsref * (dy[i] * g[i] - mg - xh * mgx), 1e-4, 1e-5));
    }
  }
}

TEST_CASE("softmax element formulas reproduce an fp64 softmax and its backward", "[ops_math]") {
  for (int n : {1, 5, 300}) {
    const auto x = inputs(-20.0f, 20.0f, n, 7), dy = inputs(-1.0f, 1.0f, n, 8);
    const float a = 0.5f;
    float mx = -std::numeric_limits<float>::infinity(), s = 0;
    for (float v : x) mx = std::max(mx, a * v);
    std::vector<float> y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) s += y[i] = softmax_exp(x[i], a, mx);
    for (float& v : y) v *= 1.0f / s;
    double ms = 0, mref = -1e300;
    for (float v : x) mref = std::max(mref, double(a) * v);
    for (float v : x) ms += std::exp(a * double(v) - mref);
    double dot = 0;
    float fdot = 0;
    for (int i = 0; i < n; ++i) dot += std::exp(a * double(x[i]) - mref) / ms * dy[i], fdot += y[i] * dy[i];
    for (int i = 0; i < n; ++i) {
      const double yref = std::exp(a * double(x[i]) - mref) / ms;
      CHECK(close(y[i], yref, 1e-5, 1e-12));
      CHECK(close(softmax_grad(y[i], dy[i], fdot, a), a * yref * (dy[i] - dot), 1e-4, 1e-7));
    }
  }
}

TEST_CASE("cross-entropy element formulas: −log softmax[t] and scale·(p − onehot)", "[ops_math]") {
  const auto x = inputs(-30.0f, 30.0f, 257, 9);
  float mx = x[0], s = 0;
  for (float v : x) mx = std::max(mx, v);
  for (float v : x) s += softmax_exp(v, 1.0f, mx);
  double lse = 0;
  for (float v : x) lse += std::exp(double(v) - mx);
  lse = std::log(lse) + mx;
  for (int t : {0, 17, 256}) CHECK(close(cross_entropy_loss(s, x[t], mx), lse - x[t], 1e-6, 1e-6));
  CHECK(cross_entropy_grad(0.25f, false, 2.0f) == 0.5f);
  CHECK(cross_entropy_grad(0.25f, true, 2.0f) == -1.5f);
}

TEST_CASE("embedding_row: offset of an id's row, −1 out of range", "[ops_math]") {
  CHECK(embedding_row(0, 10, 64) == 0);
  CHECK(embedding_row(9, 10, 64) == 9 * 64);
  CHECK(embedding_row(10, 10, 64) == -1);
  CHECK(embedding_row(-1, 10, 64) == -1);
  CHECK(embedding_row(2'000'000'000, 2'100'000'000, 4096) == int64_t{2'000'000'000} * 4096);  // no 32-bit wrap
}
