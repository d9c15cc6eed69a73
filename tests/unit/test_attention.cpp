// The fused causal attention ops (model.h ABI 2) against an fp64 reference written here from
// the contract: per (sequence b, head h), S = scale·q·kᵀ, P = softmax over s ≤ t (0 above the
// diagonal), out = P·v. Backward: central finite differences of L = Σ w·out through that
// reference on small shapes, and the fp64 chain rule written out on the gpt example's shape
// (finite differences there would take minutes). Both GEMM backends, 1 and 2 threads.
// Tolerances follow test_ops.cpp: 1e-4 of the largest magnitude plus 1e-4 relative.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace {

using namespace ops_check;
using dscpp::kernels::GemmBackend;

struct Shape {
  int64_t B, T, H, D;
  int64_t C() const { return H * D; }
  int64_t qkv() const { return B * T * 3 * C(); }
  int64_t out() const { return B * T * C(); }
  int64_t probs() const { return B * H * T * T; }
};

// Element (b, t, part, h, d) of qkv (part 0 = q, 1 = k, 2 = v) and (b, t, h, d) of out.
int64_t at_qkv(const Shape& s, int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
  return (b * s.T + t) * 3 * s.C() + part * s.C() + h * s.D + d;
}
int64_t at_out(const Shape& s, int64_t b, int64_t t, int64_t h, int64_t d) {
  return (b * s.T + t) * s.C() + h * s.D + d;
}

struct Forward {
  DVec probs, out;
};
Forward forward_ref(const Shape& s, const DVec& x, double scale) {
  Forward f{DVec(s.probs(), 0.0), DVec(s.out(), 0.0)};
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      double* P = &f.probs[(b * s.H + h) * s.T * s.T];
      for (int64_t t = 0; t < s.T; ++t) {
        double m = -INFINITY;
        std::vector<double> row(t + 1);
        for (int64_t u = 0; u <= t; ++u) {
          double dotp = 0;
          for (int64_t d = 0; d < s.D; ++d) dotp += x[at_qkv(s, b, t, 0, h, d)] * x[at_qkv(s, b, u, 1, h, d)];
          row[u] = scale * dotp;
          m = std::max(m, row[u]);
        }
        double z = 0;
        for (int64_t u = 0; u <= t; ++u) z += std::exp(row[u] - m);
        for (int64_t u = 0; u <= t; ++u) P[t * s.T + u] = std::exp(row[u] - m) / z;
        for (int64_t d = 0; d < s.D; ++d) {
          double acc = 0;
          for (int64_t u = 0; u <= t; ++u) acc += P[t * s.T + u] * x[at_qkv(s, b, u, 2, h, d)];
          f.out[at_out(s, b, t, h, d)] = acc;
        }
      }
    }
  return f;
}

// d(Σ w·out)/d(qkv) by the chain rule in fp64 (the formulas of the model.h contract).
DVec backward_ref(const Shape& s, const DVec& x, const DVec& w, double scale) {
  const Forward f = forward_ref(s, x, scale);
  DVec g(s.qkv(), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const double* P = &f.probs[(b * s.H + h) * s.T * s.T];
      for (int64_t t = 0; t < s.T; ++t) {
        std::vector<double> dp(t + 1);
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t d = 0; d < s.D; ++d) dp[u] += w[at_out(s, b, t, h, d)] * x[at_qkv(s, b, u, 2, h, d)];
          sum += dp[u] * P[t * s.T + u];
          for (int64_t d = 0; d < s.D; ++d) g[at_qkv(s, b, u, 2, h, d)] += P[t * s.T + u] * w[at_out(s, b, t, h, d)];
        }
        for (int64_t u = 0; u <= t; ++u) {
          const double ds = scale * P[t * s.T + u] * (dp[u] - sum);
          for (int64_t d = 0; d < s.D; ++d) {
            g[at_qkv(s, b, t, 0, h, d)] += ds * x[at_qkv(s, b, u, 1, h, d)];
            g[at_qkv(s, b, u, 1, h, d)] += ds * x[at_qkv(s, b, t, 0, h, d)];
          }
        }
      }
    }
  return g;
}



void check_forward(const Shape& s, float scale) {
  const Vec x = rnd(s.qkv(), 41, -1.5f, 1.5f);
  const Forward ref = forward_ref(s, to_d(x), scale);
  double big = 1.0;
  for (double v : ref.out) big = std::max(big, std::fabs(v));
  Vec probs(s.probs(), kNaN), out(s.out(), kNaN);  // every element must be written
  REQUIRE(ops().causal_attention_forward(O(), x.data(), probs.data(), out.data(), s.B, s.T, s.H, s.D, scale) ==
          DSCPP_OK);
  check_close(probs, ref.probs, 1e-6, 1e-4);
  check_close(out, ref.out, 1e-4 * big, 1e-4);
  bool zeros_above = true;  // exactly 0, not merely small
  for (int64_t p = 0; p < s.B * s.H; ++p)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t u = t + 1; u < s.T; ++u) zeros_above = zeros_above && probs[(p * s.T + t) * s.T + u] == 0.0f;
  CHECK(zeros_above);
}

// Runs the op's backward with dout = w on the op's own probs.
Vec run_backward(const Shape& s, const Vec& x, const Vec& w, float scale) {
  Vec probs(s.probs()), out(s.out()), dx(s.qkv(), kNaN), ws(s.probs(), kNaN);
  REQUIRE(ops().causal_attention_forward(O(), x.data(), probs.data(), out.data(), s.B, s.T, s.H, s.D, scale) ==
          DSCPP_OK);
  REQUIRE(ops().causal_attention_backward(O(), x.data(), probs.data(), w.data(), dx.data(), ws.data(), s.B, s.T, s.H,
                                          s.D, scale) == DSCPP_OK);
  return dx;
}

// Runs check() for shape s on every GEMM backend with 1 and 2 threads, each case named.
template <class Check>
void on_every_backend(const Shape& s, Check check) {
  for (GemmBackend be : backends())
    for (int threads : {1, 2}) {
      dscpp::kernels::set_gemm_backend(be);
      dscpp::kernels::set_cpu_threads(threads);
      INFO("B " << s.B << " T " << s.T << " H " << s.H << " D " << s.D << " " << dscpp::kernels::gemm_description()
                << ", " << threads << " threads");
      check();
    }
}

}  // namespace

TEST_CASE("causal attention forward against fp64", "[ops][attention]") {
  Restore restore;
  // One token; panel and sliver edges (T = 13, 50); D past one 32-wide sliver; the gpt shape.
  for (Shape s : {Shape{1, 1, 1, 1}, Shape{2, 13, 3, 5}, Shape{1, 50, 2, 40}, Shape{2, 128, 4, 64}})
    on_every_backend(s, [&] { check_forward(s, 1.0f / std::sqrt(static_cast<float>(s.D))); });
}

TEST_CASE("causal attention backward against finite differences", "[ops][attention]") {
  Restore restore;
  for (Shape s : {Shape{2, 13, 3, 5}, Shape{1, 30, 2, 17}})
    for (GemmBackend be : backends()) {
      dscpp::kernels::set_gemm_backend(be);
      dscpp::kernels::set_cpu_threads(2);
      const float scale = 0.4f;
      const Vec x = rnd(s.qkv(), 51, -1.5f, 1.5f), w = rnd(s.out(), 52);
      const DVec wd = to_d(w);
      const std::vector<size_t> idx = sample(s.qkv(), 53, 300);
      const DVec fd = fd_grad([&](const DVec& v) { return dot(wd, forward_ref(s, v, scale).out); }, to_d(x), idx);
      INFO("B " << s.B << " T " << s.T << " H " << s.H << " D " << s.D << " " << dscpp::kernels::gemm_description());
      check_grad(only(run_backward(s, x, w, scale), idx), fd);
    }
}

TEST_CASE("causal attention backward on the gpt shape against the fp64 chain rule", "[ops][attention]") {
  Restore restore;
  const Shape s{2, 128, 4, 64};
  const float scale = 0.125f;
  const Vec x = rnd(s.qkv(), 61, -1.5f, 1.5f), w = rnd(s.out(), 62);
  const DVec ref = backward_ref(s, to_d(x), to_d(w), scale);
  for (GemmBackend be : backends())
    for (int threads : {1, 2}) {
      dscpp::kernels::set_gemm_backend(be);
      dscpp::kernels::set_cpu_threads(threads);
      INFO(dscpp::kernels::gemm_description() << ", " << threads << " threads");
      check_grad(run_backward(s, x, w, scale), ref);
    }
}

TEST_CASE("causal attention: argument checks", "[ops][attention]") {
  const int E = DSCPP_E_INVALID_ARGUMENT;
  Vec a(3 * 2 * 4, 0.5f), p(2 * 2 * 2, 0.0f), o(2 * 4, 0.0f), ws(8, 0.0f);
  CHECK(ops().causal_attention_forward(O(), a.data(), p.data(), o.data(), 1, 2, 2, -2, 1.0f) == E);
  CHECK(ops().causal_attention_forward(O(), nullptr, p.data(), o.data(), 1, 2, 2, 2, 1.0f) == E);
  CHECK(ops().causal_attention_forward(O(), a.data(), p.data(), o.data(), 1, 2, 2, 2, kNaN) == E);
  CHECK(ops().causal_attention_forward(O(), nullptr, nullptr, nullptr, 0, 2, 2, 2, 1.0f) == DSCPP_OK);
  CHECK(ops().causal_attention_backward(O(), a.data(), p.data(), o.data(), a.data(), nullptr, 1, 2, 2, 2, 1.0f) == E);
  CHECK(ops().causal_attention_backward(O(), a.data(), p.data(), o.data(), a.data(), ws.data(), -1, 2, 2, 2, 1.0f) ==
        E);
}

// The entries that keep no T² matrix (ABI 3): the same out, bit for bit, as the ABI 2 entry
// (the same kernels make it); lse against fp64 log Σ exp(scale·q·k) to 1e-5 relative (one log
// and a T-term sum of exps in fp32); the gradient equal bit for bit to the ABI 2 backward's,
// since the probabilities are made again by the code that made them in forward.
TEST_CASE("flash attention entries: the ABI 2 results without keeping T² probabilities", "[ops][attention]") {
  Restore restore;
  for (Shape s : {Shape{1, 1, 1, 1}, Shape{2, 13, 3, 5}, Shape{2, 128, 4, 64}})
    on_every_backend(s, [&] {
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      const Vec x = rnd(s.qkv(), 71, -1.5f, 1.5f), w = rnd(s.out(), 72);
      Vec probs(s.probs()), out(s.out()), lse(s.B * s.H * s.T, kNaN), fout(s.out(), kNaN);
      REQUIRE(ops().causal_attention_forward(O(), x.data(), probs.data(), out.data(), s.B, s.T, s.H, s.D, scale) ==
              DSCPP_OK);
      REQUIRE(ops().flash_attention_forward(O(), x.data(), lse.data(), fout.data(), s.B, s.T, s.H, s.D, scale) ==
              DSCPP_OK);
      CHECK(bitwise(fout, out));
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t t = 0; t < s.T; ++t) {
            double z = 0;
            for (int64_t u = 0; u <= t; ++u) {
              double d = 0;
              for (int64_t k = 0; k < s.D; ++k) d += double(x[at_qkv(s, b, t, 0, h, k)]) * x[at_qkv(s, b, u, 1, h, k)];
              z += std::exp(scale * d);
            }
            const float got = lse[size_t((b * s.H + h) * s.T + t)];
            REQUIRE(got == Approx(std::log(z)).epsilon(1e-5).margin(1e-5));
          }
      Vec dx(s.qkv(), kNaN), fdx(s.qkv(), kNaN), ws(s.probs()), fws(s.B * s.H * s.T);
      REQUIRE(ops().causal_attention_backward(O(), x.data(), probs.data(), w.data(), dx.data(), ws.data(), s.B, s.T,
                                              s.H, s.D, scale) == DSCPP_OK);
      REQUIRE(ops().flash_attention_backward(O(), x.data(), fout.data(), lse.data(), w.data(), fdx.data(),
                                             fws.data(), s.B, s.T, s.H, s.D, scale) == DSCPP_OK);
      CHECK(bitwise(fdx, dx));
    });
  const int E = DSCPP_E_INVALID_ARGUMENT;
  Vec a(3 * 2 * 4, 0.5f), l(4, 0.0f), o(2 * 4, 0.0f);
  CHECK(ops().flash_attention_forward(O(), a.data(), nullptr, o.data(), 1, 2, 2, 2, 1.0f) == E);
  CHECK(ops().flash_attention_forward(O(), a.data(), l.data(), o.data(), 1, 2, 2, 2, kNaN) == E);
  CHECK(ops().flash_attention_backward(O(), a.data(), o.data(), l.data(), o.data(), a.data(), nullptr, 1, 2, 2, 2,
                                       1.0f) == E);
  CHECK(ops().flash_attention_backward(O(), a.data(), nullptr, l.data(), o.data(), a.data(), l.data(), 1, 2, 2, 2,
                                       1.0f) == E);
}
