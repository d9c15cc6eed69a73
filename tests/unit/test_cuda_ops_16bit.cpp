// The CUDA ops table with a 16-bit compute dtype (bf16, fp16), host-stub build, op by op against
// the CPU table's fp32 ops on the same inputs: every input is drawn, rounded to the 16-bit dtype,
// and handed to the CUDA table as 16-bit bits and to the CPU table as the (exact) fp32 values.
//
// What may differ, and the tolerances (normwise, max|a − b| ≤ tol·max|b|, in units of the
// dtype's unit roundoff u16 = 2⁻⁸ for bf16 (8 significant bits), 2⁻¹¹ for fp16 (11)):
//  - an op whose result is rounded once to 16 bits (the contract: load to fp32, compute in fp32,
//    store once): at most u16·|y| per element, plus the fp32 sums' reordering, so 1 u16 normwise;
//  - composite ops keep intermediates in the compute dtype and round each: the linear layer's
//    y before its bias/residual epilogue and its GELU, the unfused attention's scores and
//    probabilities, a GEMM's result read by the GELU backward: 1 u16 per rounding in the chain,
//    and 4 u16 for the unfused attention backward (scores → probabilities → score gradients →
//    GEMMs, each rounded; the products add terms of both signs, so the error is relative to the
//    terms rather than to the result).
// Measured on these inputs (bf16 and fp16 alike): ≤ 0.91 u16 for the single-rounding ops,
// ≤ 1.33 u16 for the composites (the unfused attention's output).
// The last case shows the comparison fails when the 16-bit table reads its inputs as the wrong
// 16-bit type.
#include "core/half.h"
#include "kernels/cuda/ops_table.h"
#include "tests/unit/cuda_table_check.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace dscpp;
using ops_check::kNaN;
using ops_check::rnd;
using ops_check::Vec;
using namespace cuda_table_check;

namespace {

float round16(float x, bool bf16) {
  return bf16 ? bf16_bits_to_float(float_to_bf16_bits(x)) : fp16_bits_to_float(float_to_fp16_bits(x));
}

// A tensor both tables take: fp32 values exactly representable in the 16-bit dtype (for the
// CPU table) and their 16-bit bits (for the CUDA table). widened() reads the bits back after the
// CUDA table wrote them.
struct Pair {
  Vec f;
  std::vector<uint16_t> h;
  bool bf16;
  Pair(const Vec& v, bool b) : f(v.size()), h(v.size()), bf16(b) {
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = b ? float_to_bf16_bits(v[i]) : float_to_fp16_bits(v[i]);
      f[i] = round16(v[i], b);
    }
  }
  Vec widened() const {
    Vec r(h.size());
    for (size_t i = 0; i < h.size(); ++i) r[i] = bf16 ? bf16_bits_to_float(h[i]) : fp16_bits_to_float(h[i]);
    return r;
  }
};

struct Tables16 {
  bool bf16;
  OpsContext ctx{nullptr};
  dscpp_ops half;
  explicit Tables16(bool b) : bf16(b), half(cuda_ops(b ? DSCPP_BF16 : DSCPP_F16, &ctx)) {}
  const dscpp_ops* H() const { return &half; }
  const dscpp_ops* C() const { return ops_check::O(); }
  double u16() const { return bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }
  Pair pair(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) const {
    return Pair(rnd(n, seed, lo, hi), bf16);
  }
  Pair nans(size_t n) const { return Pair(Vec(n, kNaN), bf16); }
};

#define CHECK_16(pair, tol) CHECK_NORMWISE((pair).widened(), (pair).f, (tol))

}  // namespace

TEST_CASE("16-bit CUDA table: GEMMs and elementwise ops round once", "[cuda_ops_16bit]") {
  for (bool bf16 : {true, false}) {
    CAPTURE(bf16);
    const Tables16 t(bf16);
    const double u = t.u16();
    {  // strided batched, both transposes, beta ≠ 0
      const int64_t M = 7, N = 9, K = 33, batch = 3;
      const Pair A = t.pair(size_t(batch * K * M), 1), B = t.pair(size_t(batch * N * K), 2);
      Pair Cm = t.pair(size_t(batch * M * N), 3);
      REQUIRE(t.half.gemm_strided_batched(t.H(), DSCPP_TRANS, DSCPP_TRANS, M, N, K, 0.5f, A.h.data(), M, K * M,
                                          B.h.data(), K, N * K, 0.25f, Cm.h.data(), N, M * N, batch) == DSCPP_OK);
      REQUIRE(t.C()->gemm_strided_batched(t.C(), DSCPP_TRANS, DSCPP_TRANS, M, N, K, 0.5f, A.f.data(), M, K * M,
                                          B.f.data(), K, N * K, 0.25f, Cm.f.data(), N, M * N, batch) == DSCPP_OK);
      CHECK_16(Cm, u);
    }
    const int64_t n = 1001;
    const Pair a = t.pair(size_t(n), 4, -3.0f, 3.0f), b = t.pair(size_t(n), 5);
    Pair y = t.nans(size_t(n));
    REQUIRE(t.half.add(t.H(), a.h.data(), b.h.data(), y.h.data(), n) == DSCPP_OK);
    REQUIRE(t.C()->add(t.C(), a.f.data(), b.f.data(), y.f.data(), n) == DSCPP_OK);
    CHECK_16(y, u);
    {  // off a 16-byte boundary: the element-by-element path, not the quads
      Pair y1 = t.nans(size_t(n));
      REQUIRE(t.half.add(t.H(), a.h.data() + 1, b.h.data() + 3, y1.h.data() + 1, n - 3) == DSCPP_OK);
      REQUIRE(t.C()->add(t.C(), a.f.data() + 1, b.f.data() + 3, y1.f.data() + 1, n - 3) == DSCPP_OK);
      const Vec got = y1.widened();
      CHECK_NORMWISE(Vec(got.begin() + 1, got.end() - 2), Vec(y1.f.begin() + 1, y1.f.end() - 2), u);
    }
    Pair z = t.pair(size_t(n), 6);
    REQUIRE(t.half.axpy(t.H(), -0.7f, a.h.data(), z.h.data(), n) == DSCPP_OK);
    REQUIRE(t.C()->axpy(t.C(), -0.7f, a.f.data(), z.f.data(), n) == DSCPP_OK);
    CHECK_16(z, u);
    REQUIRE(t.half.scale(t.H(), 1.3f, z.h.data(), n) == DSCPP_OK);
    REQUIRE(t.C()->scale(t.C(), 1.3f, z.f.data(), n) == DSCPP_OK);
    CHECK_16(z, 2 * u);  // the axpy's rounding, then the scale's
    REQUIRE(t.half.gelu_forward(t.H(), a.h.data(), y.h.data(), n) == DSCPP_OK);
    REQUIRE(t.C()->gelu_forward(t.C(), a.f.data(), y.f.data(), n) == DSCPP_OK);
    CHECK_16(y, u);
    REQUIRE(t.half.gelu_backward(t.H(), a.h.data(), b.h.data(), y.h.data(), n) == DSCPP_OK);
    REQUIRE(t.C()->gelu_backward(t.C(), a.f.data(), b.f.data(), y.f.data(), n) == DSCPP_OK);
    CHECK_16(y, u);
    REQUIRE(t.half.relu_backward(t.H(), a.h.data(), b.h.data(), y.h.data(), n) == DSCPP_OK);
    REQUIRE(t.C()->relu_backward(t.C(), a.f.data(), b.f.data(), y.f.data(), n) == DSCPP_OK);
    CHECK(y.widened() == y.f);  // a selection: exact
    // Dropout: the same mask, and x·(1/(1 − p)) rounded once: exactly the fp32 result rounded.
    REQUIRE(t.half.dropout(t.H(), a.h.data(), y.h.data(), n, 0.3f, 12) == DSCPP_OK);
    REQUIRE(t.C()->dropout(t.C(), a.f.data(), y.f.data(), n, 0.3f, 12) == DSCPP_OK);
    for (float& v : y.f) v = round16(v, bf16);
    CHECK(y.widened() == y.f);
    Pair c = t.nans(size_t(n));
    REQUIRE(t.half.copy(t.H(), a.h.data(), c.h.data(), n) == DSCPP_OK);
    CHECK(c.h == a.h);
    REQUIRE(t.half.fill(t.H(), c.h.data(), 0.1f, n) == DSCPP_OK);
    CHECK(c.widened() == Vec(size_t(n), round16(0.1f, bf16)));
    const int64_t rows = 37, cols = 27;  // bias add and gradient (column sums over 37 rows)
    const Pair bias = t.pair(size_t(cols), 7), dy = t.pair(size_t(rows * cols), 8);
    Pair x = t.pair(size_t(rows * cols), 9), db = t.pair(size_t(cols), 10);
    REQUIRE(t.half.bias_add(t.H(), x.h.data(), bias.h.data(), rows, cols) == DSCPP_OK);
    REQUIRE(t.C()->bias_add(t.C(), x.f.data(), bias.f.data(), rows, cols) == DSCPP_OK);
    CHECK_16(x, u);
    REQUIRE(t.half.bias_grad(t.H(), dy.h.data(), db.h.data(), rows, cols) == DSCPP_OK);
    REQUIRE(t.C()->bias_grad(t.C(), dy.f.data(), db.f.data(), rows, cols) == DSCPP_OK);
    CHECK_16(db, u);
  }
}

TEST_CASE("16-bit CUDA table: row ops, embedding and cross-entropy round once", "[cuda_ops_16bit]") {
  for (bool bf16 : {true, false}) {
    CAPTURE(bf16);
    const Tables16 t(bf16);
    const double u = t.u16();
    const int64_t rows = 13, cols = 70;
    const Pair x = t.pair(size_t(rows * cols), 11, -2.0f, 2.0f), g = t.pair(size_t(cols), 12, 0.5f, 1.5f);
    const Pair be = t.pair(size_t(cols), 13), dy = t.pair(size_t(rows * cols), 14);
    Pair y = t.nans(size_t(rows * cols)), dx = t.nans(size_t(rows * cols));
    Pair dg = t.pair(size_t(cols), 15), dbeta = t.pair(size_t(cols), 16);
    const size_t nr = static_cast<size_t>(rows);
    Vec mh(nr), rh(nr), mc(nr), rc(nr);
    REQUIRE(t.half.layernorm_forward(t.H(), x.h.data(), g.h.data(), be.h.data(), y.h.data(), mh.data(), rh.data(), rows,
                                     cols, 1e-5f) == DSCPP_OK);
    REQUIRE(t.C()->layernorm_forward(t.C(), x.f.data(), g.f.data(), be.f.data(), y.f.data(), mc.data(), rc.data(), rows,
                                     cols, 1e-5f) == DSCPP_OK);
    CHECK_16(y, u);
    CHECK_NORMWISE(mh, mc, sum_tol(cols));  // the statistics stay fp32
    CHECK_NORMWISE(rh, rc, sum_tol(cols));
    REQUIRE(t.half.layernorm_backward(t.H(), dy.h.data(), x.h.data(), g.h.data(), mc.data(), rc.data(), dx.h.data(),
                                      dg.h.data(), dbeta.h.data(), rows, cols) == DSCPP_OK);
    REQUIRE(t.C()->layernorm_backward(t.C(), dy.f.data(), x.f.data(), g.f.data(), mc.data(), rc.data(), dx.f.data(),
                                      dg.f.data(), dbeta.f.data(), rows, cols) == DSCPP_OK);
    CHECK_16(dx, u);
    CHECK_16(dg, u);
    CHECK_16(dbeta, u);
    REQUIRE(t.half.softmax_forward(t.H(), x.h.data(), y.h.data(), rows, cols) == DSCPP_OK);
    REQUIRE(t.C()->softmax_forward(t.C(), x.f.data(), y.f.data(), rows, cols) == DSCPP_OK);
    CHECK_16(y, u);
    const Pair p(y.f, bf16);  // the same probabilities into both backwards
    REQUIRE(t.half.softmax_backward(t.H(), p.h.data(), dy.h.data(), dx.h.data(), rows, cols) == DSCPP_OK);
    REQUIRE(t.C()->softmax_backward(t.C(), p.f.data(), dy.f.data(), dx.f.data(), rows, cols) == DSCPP_OK);
    CHECK_16(dx, u);
    {  // causal softmax over 3 groups of 9 × 9
      const int64_t groups = 3, T = 9;
      const Pair s = t.pair(size_t(groups * T * T), 17, -3.0f, 3.0f);
      Pair pr = t.nans(s.f.size()), ds = t.nans(s.f.size());
      REQUIRE(t.half.causal_softmax_forward(t.H(), s.h.data(), pr.h.data(), groups, T, 0.4f) == DSCPP_OK);
      REQUIRE(t.C()->causal_softmax_forward(t.C(), s.f.data(), pr.f.data(), groups, T, 0.4f) == DSCPP_OK);
      CHECK_16(pr, u);
      const Pair pin(pr.f, bf16), dp = t.pair(s.f.size(), 18);
      REQUIRE(t.half.causal_softmax_backward(t.H(), pin.h.data(), dp.h.data(), ds.h.data(), groups, T, 0.4f) ==
              DSCPP_OK);
      REQUIRE(t.C()->causal_softmax_backward(t.C(), pin.f.data(), dp.f.data(), ds.f.data(), groups, T, 0.4f) ==
              DSCPP_OK);
      CHECK_16(ds, u);
    }
    {  // embedding: a gather (exact) and per-id sums
      const int64_t vocab = 11, dim = 6, n = 20;
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7) % vocab);
      const Pair table = t.pair(size_t(vocab * dim), 19), dout = t.pair(size_t(n * dim), 20);
      Pair out = t.nans(size_t(n * dim)), dtable = t.pair(size_t(vocab * dim), 21);
      REQUIRE(t.half.embedding_forward(t.H(), ids.data(), table.h.data(), out.h.data(), n, vocab, dim) == DSCPP_OK);
      REQUIRE(t.C()->embedding_forward(t.C(), ids.data(), table.f.data(), out.f.data(), n, vocab, dim) == DSCPP_OK);
      CHECK(out.widened() == out.f);
      REQUIRE(t.half.embedding_backward(t.H(), ids.data(), dout.h.data(), dtable.h.data(), n, vocab, dim) == DSCPP_OK);
      REQUIRE(t.C()->embedding_backward(t.C(), ids.data(), dout.f.data(), dtable.f.data(), n, vocab, dim) == DSCPP_OK);
      CHECK_16(dtable, u);
    }
    {  // cross-entropy: the loss from the same 16-bit logits, summed in fp64 on the host
      std::vector<int32_t> targets(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = r == 4 ? -1 : int32_t((r * 5) % cols);
      double lh = 0, lc = 0;
      int64_t nh = 0, nc = 0, hh = 0, hc = 0;
      REQUIRE(t.half.cross_entropy_forward(t.H(), x.h.data(), targets.data(), y.h.data(), rows, cols, &lh, &nh, &hh) ==
              DSCPP_OK);
      REQUIRE(t.C()->cross_entropy_forward(t.C(), x.f.data(), targets.data(), y.f.data(), rows, cols, &lc, &nc, &hc) ==
              DSCPP_OK);
      CHECK(nh == nc);
      CHECK(hh == hc);
      CHECK(std::fabs(lh - lc) <= sum_tol(cols) * std::fabs(lc));
      CHECK_16(y, u);
      const Pair probs(y.f, bf16);
      REQUIRE(t.half.cross_entropy_backward(t.H(), probs.h.data(), targets.data(), dx.h.data(), rows, cols, 0.3f) ==
              DSCPP_OK);
      REQUIRE(t.C()->cross_entropy_backward(t.C(), probs.f.data(), targets.data(), dx.f.data(), rows, cols, 0.3f) ==
              DSCPP_OK);
      CHECK_16(dx, u);
    }
  }
}

TEST_CASE("16-bit CUDA table: attention and linear layers", "[cuda_ops_16bit]") {
  for (bool bf16 : {true, false}) {
    CAPTURE(bf16);
    Tables16 t(bf16);
    const double u = t.u16();
    const int64_t batch = 2, T = 19, heads = 3, D = 8, C = heads * D;
    const float scale = 1.0f / std::sqrt(float(D));
    const Pair qkv = t.pair(size_t(batch * T * 3 * C), 22, -2.0f, 2.0f), dout = t.pair(size_t(batch * T * C), 23);
    // flash entries: the blockwise path widens to fp32 and rounds each result once, and so do
    // the tiled kernels (DSCPP_FLASH_ATTENTION=tiled) as they load their tiles
    for (bool tiled : {false, true}) {
      CAPTURE(tiled);
      t.ctx.tiled_attention = tiled;
      Pair out = t.nans(size_t(batch * T * C)), dqkv = t.nans(qkv.f.size());
      Vec lse_h(size_t(batch * heads * T)), lse_c(lse_h.size()), ws(lse_h.size());
      REQUIRE(t.half.flash_attention_forward(t.H(), qkv.h.data(), lse_h.data(), out.h.data(), batch, T, heads, D,
                                             scale) == DSCPP_OK);
      REQUIRE(t.C()->flash_attention_forward(t.C(), qkv.f.data(), lse_c.data(), out.f.data(), batch, T, heads, D,
                                             scale) == DSCPP_OK);
      CHECK_16(out, u);
      CHECK_NORMWISE(lse_h, lse_c, sum_tol(T));
      const Pair o(out.f, bf16);  // the same forward output into both backwards
      REQUIRE(t.half.flash_attention_backward(t.H(), qkv.h.data(), o.h.data(), lse_c.data(), dout.h.data(),
                                              dqkv.h.data(), ws.data(), batch, T, heads, D, scale) == DSCPP_OK);
      REQUIRE(t.C()->flash_attention_backward(t.C(), qkv.f.data(), o.f.data(), lse_c.data(), dout.f.data(),
                                              dqkv.f.data(), ws.data(), batch, T, heads, D, scale) == DSCPP_OK);
      CHECK_16(dqkv, u);
    }
    t.ctx.tiled_attention = false;
    {  // the unfused entries keep probabilities and score gradients in the compute dtype
      Pair probs = t.nans(size_t(batch * heads * T * T)), out = t.nans(size_t(batch * T * C));
      Pair dqkv = t.nans(qkv.f.size()), ws = t.nans(probs.f.size());
      REQUIRE(t.half.causal_attention_forward(t.H(), qkv.h.data(), probs.h.data(), out.h.data(), batch, T, heads, D,
                                              scale) == DSCPP_OK);
      REQUIRE(t.C()->causal_attention_forward(t.C(), qkv.f.data(), probs.f.data(), out.f.data(), batch, T, heads, D,
                                              scale) == DSCPP_OK);
      CHECK_16(probs, 2 * u);  // the scores are rounded before the softmax
      CHECK_16(out, 3 * u);  // scores, probabilities, output
      REQUIRE(t.half.causal_attention_backward(t.H(), qkv.h.data(), probs.h.data(), dout.h.data(), dqkv.h.data(),
                                               ws.h.data(), batch, T, heads, D, scale) == DSCPP_OK);
      REQUIRE(t.C()->causal_attention_backward(t.C(), qkv.f.data(), probs.f.data(), dout.f.data(), dqkv.f.data(),
                                               ws.f.data(), batch, T, heads, D, scale) == DSCPP_OK);
      CHECK_16(dqkv, 4 * u);
    }
    {  // linear: y rounded by the GEMM and again by the epilogue; GELU of the rounded y
      const int64_t rows = 11, in = 29, out = 13;
      const Pair x = t.pair(size_t(rows * in), 24), W = t.pair(size_t(out * in), 25), b = t.pair(size_t(out), 26);
      const Pair res = t.pair(size_t(rows * out), 27), dy = t.pair(size_t(rows * out), 28),
                 pre = t.pair(x.f.size(), 29);
      Pair y = t.nans(size_t(rows * out)), gl = t.nans(y.f.size()), dW = t.pair(W.f.size(), 30);
      Pair db = t.pair(size_t(out), 31), dx = t.nans(x.f.size());
      REQUIRE(t.half.linear_forward(t.H(), x.h.data(), W.h.data(), b.h.data(), res.h.data(), y.h.data(), gl.h.data(),
                                    rows, in, out) == DSCPP_OK);
      REQUIRE(t.C()->linear_forward(t.C(), x.f.data(), W.f.data(), b.f.data(), res.f.data(), y.f.data(), gl.f.data(),
                                    rows, in, out) == DSCPP_OK);
      CHECK_16(y, 2 * u);
      CHECK_16(gl, 3 * u);
      REQUIRE(t.half.linear_backward(t.H(), dy.h.data(), x.h.data(), W.h.data(), dW.h.data(), db.h.data(), dx.h.data(),
                                     pre.h.data(), rows, in, out) == DSCPP_OK);
      REQUIRE(t.C()->linear_backward(t.C(), dy.f.data(), x.f.data(), W.f.data(), dW.f.data(), db.f.data(), dx.f.data(),
                                     pre.f.data(), rows, in, out) == DSCPP_OK);
      CHECK_16(dW, u);
      CHECK_16(db, u);
      CHECK_16(dx, 2 * u);  // the GEMM's rounding, then the GELU backward's
    }
  }
}

TEST_CASE("16-bit CUDA table: the comparison catches a table reading the wrong 16-bit type", "[cuda_ops_16bit]") {
  const Tables16 t(true);
  OpsContext ctx(nullptr);
  const dscpp_ops wrong = cuda_ops(DSCPP_F16, &ctx);  // fp16 arithmetic on bf16 bits
  const int64_t n = 257;
  const Pair a = t.pair(size_t(n), 40), b = t.pair(size_t(n), 41);
  Pair y = t.nans(size_t(n));
  REQUIRE(wrong.add(&wrong, a.h.data(), b.h.data(), y.h.data(), n) == DSCPP_OK);
  REQUIRE(t.C()->add(t.C(), a.f.data(), b.f.data(), y.f.data(), n) == DSCPP_OK);
  CHECK_FALSE(ops_check::normwise(y.widened(), y.f) <= 1000 * t.u16());
}
