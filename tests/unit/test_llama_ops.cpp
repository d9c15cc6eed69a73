// The ops Llama-style models need (model.h ABI 5: mul, SiLU, SwiGLU, RMSNorm, rotary embeddings,
// copy_2d) on the CPU table against fp64 references written here, their backwards against
// central finite differences of L = Σ w·y through those references (tolerances: test_ops.cpp's
// header), the rotary frequencies against transformers' own (printed by tests/data/hf's
// generator), and the CUDA table in host-stub mode against the CPU table.
#include "kernels/cuda/ops_table.h"
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#include "kernels/rope_math.h"
#include "tests/unit/cuda_table_check.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

namespace {

using namespace ops_check;
using cuda_table_check::Tables;

double silu_ref(double x) { return x / (1 + std::exp(-x)); }

DVec rms_ref(const DVec& x, const DVec& g, int64_t rows, int64_t cols, double eps, DVec* rstd = nullptr) {
  DVec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c] * x[r * cols + c];
    const double rs = 1 / std::sqrt(s / double(cols) + eps);
    if (rstd) (*rstd)[r] = rs;
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * rs * g[c];
  }
  return y;
}

struct RopeShape {
  int64_t batch, T, width, heads, head_dim;
};

// transformers' apply_rotary_pos_emb (rotate_half) or Meta's adjacent pairs, in fp64 from the
// frequencies given, on the first `dim` columns of each head.
DVec rope_ref(const DVec& x, const RopeShape& s, const std::vector<double>& inv_freq, bool interleaved,
              const std::vector<int32_t>& pos, int64_t pos0, double sign = 1) {
  DVec y = x;
  const int64_t pairs = int64_t(inv_freq.size());
  for (int64_t row = 0; row < s.batch * s.T; ++row) {
    const double p = pos.empty() ? double(pos0 + row % s.T) : double(pos[size_t(row)]);
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < pairs; ++i) {
        const int64_t a = row * s.width + h * s.head_dim + (interleaved ? 2 * i : i);
        const int64_t b = row * s.width + h * s.head_dim + (interleaved ? 2 * i + 1 : i + pairs);
        const double ang = p * inv_freq[size_t(i)], c = std::cos(ang), sn = sign * std::sin(ang);
        y[a] = x[a] * c - x[b] * sn;
        y[b] = x[b] * c + x[a] * sn;
      }
  }
  return y;
}

std::vector<double> freqs_of(const dscpp_rope& r, int64_t head_dim) {
  dscpp::hd::RopeTable t;
  REQUIRE(dscpp::hd::rope_table(&r, head_dim, &t));
  return std::vector<double>(t.inv_freq, t.inv_freq + t.pairs);
}

}  // namespace

TEST_CASE("mul, SiLU and SwiGLU match fp64 and their backwards match finite differences", "[ops][llama_ops]") {
  for (int64_t n : {1, 7, 33, 1000, 70000}) {
    const Vec a = rnd(size_t(n), 1, -6, 6), b = rnd(size_t(n), 2, -2, 2), w = rnd(size_t(n), 3);
    Vec y(static_cast<size_t>(n)), gate_y(static_cast<size_t>(n));
    DVec ref(static_cast<size_t>(n)), silu_d(static_cast<size_t>(n)), swi(static_cast<size_t>(n));
    REQUIRE(ops().mul(O(), a.data(), b.data(), y.data(), n) == DSCPP_OK);
    for (size_t i = 0; i < size_t(n); ++i) ref[i] = double(a[i]) * b[i];
    check_close(y, ref, 0, kU);
    REQUIRE(ops().silu_forward(O(), a.data(), y.data(), n) == DSCPP_OK);
    REQUIRE(ops().swiglu_forward(O(), a.data(), b.data(), gate_y.data(), n) == DSCPP_OK);
    for (size_t i = 0; i < size_t(n); ++i) silu_d[i] = silu_ref(a[i]), swi[i] = silu_ref(a[i]) * b[i];
    check_close(y, silu_d, 1e-7, 4 * kU);
    check_close(gate_y, swi, 1e-7, 6 * kU);

    // Backwards: L = Σ w·y is elementwise, so the FD of each element is its own derivative.
    Vec dx(static_cast<size_t>(n)), dgate(static_cast<size_t>(n)), dup(static_cast<size_t>(n));
    REQUIRE(ops().silu_backward(O(), a.data(), w.data(), dx.data(), n) == DSCPP_OK);
    REQUIRE(ops().swiglu_backward(O(), a.data(), b.data(), w.data(), dgate.data(), dup.data(), n) == DSCPP_OK);
    const auto idx = sample(size_t(n), 4);
    DVec fd_silu(size_t(n), 0), fd_gate(size_t(n), 0), fd_up(size_t(n), 0);
    for (size_t i : idx) {
      const double h = 1e-3, x = a[i];
      fd_silu[i] = w[i] * (silu_ref(x + h) - silu_ref(x - h)) / (2 * h);
      fd_gate[i] = fd_silu[i] * b[i];
      fd_up[i] = w[i] * silu_ref(x);
    }
    check_grad(only(dx, idx), fd_silu);
    check_grad(only(dgate, idx), fd_gate);
    check_grad(only(dup, idx), fd_up);
    // In place: dgate into gate, dup into up give the same bits.
    Vec g2 = a, u2 = b;
    REQUIRE(ops().swiglu_backward(O(), g2.data(), u2.data(), w.data(), g2.data(), u2.data(), n) == DSCPP_OK);
    CHECK(bitwise(g2, dgate));
    CHECK(bitwise(u2, dup));
  }
  Vec v(4);
  CHECK(ops().swiglu_backward(O(), v.data(), v.data(), v.data(), v.data(), nullptr, 4) == DSCPP_E_INVALID_ARGUMENT);
  CHECK(ops().swiglu_backward(O(), v.data(), v.data(), v.data(), v.data(), v.data(), 4) == DSCPP_E_INVALID_ARGUMENT);
  CHECK(ops().mul(O(), v.data(), nullptr, v.data(), 4) == DSCPP_E_INVALID_ARGUMENT);
}

TEST_CASE("RMSNorm matches fp64 and its backward matches finite differences", "[ops][llama_ops]") {
  // One column is left out: its output is ±γ, and near x = 0 its derivative ε/(x² + ε)^1.5 is too steep
  // for finite differences.
  for (int64_t cols : {3, 7, 33, 1000}) {
    const int64_t rows = cols == 1000 ? 40 : 13;
    const size_t n = size_t(rows * cols);
    const Vec x = rnd(n, 10, -2, 2), g = rnd(size_t(cols), 11, 0.5, 1.5), w = rnd(n, 12);
    const float eps = 1e-5f;
    Vec y(n), rstd(static_cast<size_t>(rows));
    REQUIRE(ops().rmsnorm_forward(O(), x.data(), g.data(), y.data(), rstd.data(), rows, cols, eps) == DSCPP_OK);
    DVec rs_ref(static_cast<size_t>(rows));
    check_close(y, rms_ref(to_d(x), to_d(g), rows, cols, eps, &rs_ref), 1e-6, sum_tol(cols) * 4);
    check_close(rstd, rs_ref, 0, sum_tol(cols) * 2);

    Vec dx(n), dg(size_t(cols), 0.25f);  // dgamma accumulates onto what is there
    REQUIRE(ops().rmsnorm_backward(O(), w.data(), x.data(), g.data(), rstd.data(), dx.data(), dg.data(), rows, cols) ==
            DSCPP_OK);
    const DVec wd = to_d(w), gd = to_d(g), xd = to_d(x);
    const auto ix = sample(n, 13);
    check_grad(only(dx, ix), fd_grad([&](const DVec& v) { return dot(wd, rms_ref(v, gd, rows, cols, eps)); }, xd, ix));
    DVec fd_g = fd_grad([&](const DVec& v) { return dot(wd, rms_ref(xd, v, rows, cols, eps)); }, gd);
    for (double& v : fd_g) v += 0.25;
    check_grad(dg, fd_g);
    // dx may overwrite dy.
    Vec dy = w, dg2(size_t(cols), 0.25f);
    REQUIRE(ops().rmsnorm_backward(O(), dy.data(), x.data(), g.data(), rstd.data(), dy.data(), dg2.data(), rows,
                                   cols) == DSCPP_OK);
    CHECK(bitwise(dy, dx));
    CHECK(bitwise(dg2, dg));
  }
  Vec v(4);
  float r = 0;
  CHECK(ops().rmsnorm_forward(O(), v.data(), v.data(), v.data(), &r, 1, 4, -1.0f) == DSCPP_E_INVALID_ARGUMENT);
}

TEST_CASE("rotary frequencies are transformers' (default and Llama 3 rescaled)", "[ops][llama_ops]") {
  // Printed by tests/data/hf/make_parity.py from LlamaRotaryEmbedding.inv_freq (fp32), head_dim 8.
  dscpp_rope plain{};
  plain.theta = 10000.0f;
  const std::vector<double> want_plain = {1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513};
  dscpp_rope l3{};
  l3.theta = 500000.0f;
  l3.llama3_factor = 8.0f;
  l3.low_freq_factor = 1.0f;
  l3.high_freq_factor = 4.0f;
  l3.original_max_position = 8192.0f;
  // kept, kept, smoothed, divided by the factor.
  const std::vector<double> want_l3 = {1.0, 0.03760603070259094, 0.0005248460220173001, 6.647869668086059e-06};
  const auto got_plain = freqs_of(plain, 8), got_l3 = freqs_of(l3, 8);
  for (size_t i = 0; i < 4; ++i) {
    INFO("pair " << i);
    CHECK(std::fabs(got_plain[i] - want_plain[i]) <= 2 * kU * want_plain[i]);
    CHECK(std::fabs(got_l3[i] - want_l3[i]) <= 4 * kU * want_l3[i]);
  }
  dscpp_rope bad = plain;
  dscpp::hd::RopeTable t;
  bad.rotary_dim = 3;
  CHECK_FALSE(dscpp::hd::rope_table(&bad, 8, &t));
  bad.rotary_dim = 10;
  CHECK_FALSE(dscpp::hd::rope_table(&bad, 8, &t));
  bad = l3;
  bad.high_freq_factor = 0.5f;
  CHECK_FALSE(dscpp::hd::rope_table(&bad, 8, &t));
  CHECK_FALSE(dscpp::hd::rope_table(nullptr, 8, &t));
}

TEST_CASE("rotary embedding rotates q and k heads as transformers does; backward is its transpose",
          "[ops][llama_ops]") {
  // A packed [q (4 heads) | k (2) | v (2)] row of head_dim 8: rotating 6 heads leaves v alone.
  const RopeShape s{3, 5, 8 * 8, 6, 8};
  dscpp_rope r{};
  r.theta = 10000.0f;
  for (int interleaved : {0, 1})
    for (int32_t rotary_dim : {0, 4}) {
      r.interleaved = interleaved;
      r.rotary_dim = rotary_dim;
      const auto f = freqs_of(r, s.head_dim);
      const size_t n = size_t(s.batch * s.T * s.width);
      const Vec x = rnd(n, 20);
      for (bool explicit_pos : {false, true}) {
        std::vector<int32_t> pos;
        if (explicit_pos)
          for (int64_t i = 0; i < s.batch * s.T; ++i) pos.push_back(int32_t((i * 7) % 11));
        Vec y = x;
        REQUIRE(ops().rope_forward(O(), y.data(), s.batch, s.T, s.width, s.heads, s.head_dim,
                                   explicit_pos ? pos.data() : nullptr, 3, &r) == DSCPP_OK);
        INFO("interleaved " << interleaved << ", rotary_dim " << rotary_dim << ", positions " << explicit_pos);
        check_close(y, rope_ref(to_d(x), s, f, interleaved, pos, 3), 4 * kU, 4 * kU);
        // Backward: the opposite rotation, i.e. the transpose (the rotation is orthogonal).
        Vec back = y;
        REQUIRE(ops().rope_backward(O(), back.data(), s.batch, s.T, s.width, s.heads, s.head_dim,
                                    explicit_pos ? pos.data() : nullptr, 3, &r) == DSCPP_OK);
        check_close(back, to_d(x), 8 * kU, 8 * kU);
      }
    }
  Vec v(64);
  const int32_t negative = -1;
  CHECK(ops().rope_forward(O(), v.data(), 1, 1, 8, 1, 8, &negative, 0, &r) == DSCPP_E_INVALID_ARGUMENT);
  CHECK(ops().rope_forward(O(), v.data(), 1, 1, 7, 1, 8, nullptr, 0, &r) == DSCPP_E_INVALID_ARGUMENT);
  CHECK(ops().rope_forward(O(), v.data(), 1, 1, 8, 1, 8, nullptr, 0, nullptr) == DSCPP_E_INVALID_ARGUMENT);
}

TEST_CASE("copy_2d copies and accumulates strided blocks", "[ops][llama_ops]") {
  const int64_t rows = 70, cols = 9, src_ld = 20, dst_ld = 13;
  const Vec src = rnd(size_t(rows * src_ld), 30), start = rnd(size_t(rows * dst_ld), 31);
  for (int32_t acc : {0, 1}) {
    Vec dst = start;
    REQUIRE(ops().copy_2d(O(), src.data() + 5, src_ld, dst.data() + 2, dst_ld, rows, cols, acc) == DSCPP_OK);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dst_ld; ++c) {
        const float before = start[size_t(r * dst_ld + c)], got = dst[size_t(r * dst_ld + c)];
        if (c < 2 || c >= 2 + cols) {
          REQUIRE(got == before);
        } else {
          const float v = src[size_t(r * src_ld + 5 + c - 2)];
          REQUIRE(got == (acc ? before + v : v));
        }
      }
  }
  Vec v(4);
  CHECK(ops().copy_2d(O(), v.data(), 1, v.data(), 2, 1, 2, 0) == DSCPP_E_INVALID_ARGUMENT);
  CHECK(ops().copy_2d(O(), v.data(), 2, v.data(), 2, 1, 2, 2) == DSCPP_E_INVALID_ARGUMENT);
}

// The CUDA table's kernels against the CPU table: the same shared element math (equal within a
// few rounding steps where the compilers contract differently) and row sums in another order
// (sum_tol).
TEST_CASE("CUDA table (host stub) Llama ops agree with the CPU table", "[cuda_ops_table][llama_ops]") {
  Tables t;
  const int64_t rows = 37, cols = 300, n = rows * cols;
  const Vec a = rnd(size_t(n), 40, -5, 5), b = rnd(size_t(n), 41), w = rnd(size_t(n), 42);
  auto both = [&](auto call) {
    Vec gy(static_cast<size_t>(n)), cy(static_cast<size_t>(n));
    REQUIRE(call(t.G(), gy) == DSCPP_OK);
    REQUIRE(call(t.C(), cy) == DSCPP_OK);
    return std::pair<Vec, Vec>{gy, cy};
  };
  for (auto [g, c] : {both([&](const dscpp_ops* o, Vec& y) { return o->mul(o, a.data(), b.data(), y.data(), n); }),
                      both([&](const dscpp_ops* o, Vec& y) { return o->silu_forward(o, a.data(), y.data(), n); }),
                      both([&](const dscpp_ops* o, Vec& y) {
                        return o->silu_backward(o, a.data(), w.data(), y.data(), n);
                      }),
                      both([&](const dscpp_ops* o, Vec& y) {
                        return o->swiglu_forward(o, a.data(), b.data(), y.data(), n);
                      })})
    CHECK_NORMWISE(g, c, 8 * kU);
  Vec gg(static_cast<size_t>(n)), gu(static_cast<size_t>(n)), cg(static_cast<size_t>(n)), cu(static_cast<size_t>(n));
  REQUIRE(t.gpu.swiglu_backward(t.G(), a.data(), b.data(), w.data(), gg.data(), gu.data(), n) == DSCPP_OK);
  REQUIRE(t.C()->swiglu_backward(t.C(), a.data(), b.data(), w.data(), cg.data(), cu.data(), n) == DSCPP_OK);
  CHECK_NORMWISE(gg, cg, 8 * kU);
  CHECK_NORMWISE(gu, cu, 8 * kU);

  const Vec gamma = rnd(size_t(cols), 43, 0.5, 1.5);
  Vec gy(static_cast<size_t>(n)), cy(static_cast<size_t>(n)), grs(static_cast<size_t>(rows)),
      crs(static_cast<size_t>(rows));
  REQUIRE(t.gpu.rmsnorm_forward(t.G(), a.data(), gamma.data(), gy.data(), grs.data(), rows, cols, 1e-6f) == DSCPP_OK);
  REQUIRE(t.C()->rmsnorm_forward(t.C(), a.data(), gamma.data(), cy.data(), crs.data(), rows, cols, 1e-6f) == DSCPP_OK);
  CHECK_NORMWISE(gy, cy, 4 * sum_tol(cols));
  CHECK_NORMWISE(grs, crs, 2 * sum_tol(cols));
  Vec gdx(static_cast<size_t>(n)), cdx(static_cast<size_t>(n)), gdg(size_t(cols), 0.5f), cdg(size_t(cols), 0.5f);
  REQUIRE(t.gpu.rmsnorm_backward(t.G(), w.data(), a.data(), gamma.data(), crs.data(), gdx.data(), gdg.data(), rows,
                                 cols) == DSCPP_OK);
  REQUIRE(t.C()->rmsnorm_backward(t.C(), w.data(), a.data(), gamma.data(), crs.data(), cdx.data(), cdg.data(), rows,
                                  cols) == DSCPP_OK);
  CHECK_NORMWISE(gdx, cdx, 4 * sum_tol(cols));
  CHECK_NORMWISE(gdg, cdg, 4 * sum_tol(rows));

  dscpp_rope r{};
  r.theta = 500000.0f;
  r.llama3_factor = 8.0f;
  r.low_freq_factor = 1.0f;
  r.high_freq_factor = 4.0f;
  r.original_max_position = 8192.0f;
  const int64_t batch = 2, T = 9, heads = 5, D = 16, width = 7 * D;  // 5 of 7 heads rotated
  const Vec x = rnd(size_t(batch * T * width), 44);
  for (bool backward : {false, true}) {
    Vec gx = x, cx = x;
    auto fn = backward ? t.gpu.rope_backward : t.gpu.rope_forward;
    auto cfn = backward ? t.C()->rope_backward : t.C()->rope_forward;
    REQUIRE(fn(t.G(), gx.data(), batch, T, width, heads, D, nullptr, 100, &r) == DSCPP_OK);
    REQUIRE(cfn(t.C(), cx.data(), batch, T, width, heads, D, nullptr, 100, &r) == DSCPP_OK);
    CHECK_NORMWISE(gx, cx, 4 * kU);
  }
  const int32_t negative[2] = {0, -3};
  Vec small(32);
  CHECK(t.gpu.rope_forward(t.G(), small.data(), 1, 2, 16, 1, 16, negative, 0, &r) == DSCPP_E_INVALID_ARGUMENT);

  Vec gd(size_t(rows * 20), 1.0f), cd(size_t(rows * 20), 1.0f);
  for (int32_t acc : {0, 1}) {
    REQUIRE(t.gpu.copy_2d(t.G(), a.data() + 3, cols, gd.data() + 1, 20, rows, 11, acc) == DSCPP_OK);
    REQUIRE(t.C()->copy_2d(t.C(), a.data() + 3, cols, cd.data() + 1, 20, rows, 11, acc) == DSCPP_OK);
    CHECK(bitwise(gd, cd));
  }
}
