// The CUDA ops table's GPU-speed entries in host-stub mode against the CPU table: attention
// without T² scores (flash_attention_*) and the GEMMs on tensor-core math (kernels/gemm_math.h).
// Tolerances as in test_cuda_ops_table.cpp (cuda_table_check.h).
#include "kernels/cuda/ops_kernels.h"
#include "kernels/cuda/ops_table.h"
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#include "tests/unit/cuda_table_check.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

using namespace dscpp;
using namespace cuda_table_check;
using ops_check::kNaN;
using ops_check::rnd;
using ops_check::Vec;

// Reduced-precision GEMM math: tf32 asks cuBLAS for the FAST_TF32 compute type, whose stub
// rounds the operands as kernels/gemm_math.h says; bf16 and fp16 cast both operands to 16 bits
// first (OpsContext::stage) and the stub widens them back. Checked three ways: equal bits to the
// CPU GEMM over operands rounded by hand (the routing); within the rounding bound of the exact
// product, 2·2^-p·Σ|a·b| for a p-bit mantissa (two rounded operands) plus fp32's own K·u; and
// not equal to the exact product (the rounding happened).
TEST_CASE("CUDA table (host stub) GEMMs on tf32/bf16/fp16 tensor-core math round their operands", "[cuda_ops_table]") {
  using kernels::GemmMath;
  CHECK(kernels::round_for_gemm(1.0f + 0x1p-11f, GemmMath::tf32) == 1.0f);  // a tie: to even
  CHECK(kernels::round_for_gemm(1.0f + 0x3p-11f, GemmMath::tf32) == 1.0f + 0x1p-9f);
  CHECK(kernels::round_for_gemm(1.0f + 0x1p-9f, GemmMath::bf16) == 1.0f);
  CHECK(kernels::round_for_gemm(70000.0f, GemmMath::fp16) == INFINITY);
  CHECK(kernels::parse_gemm_math("bf16") == GemmMath::bf16);
  CHECK_FALSE(kernels::parse_gemm_math("fp8").has_value());
  Tables t;
  const int64_t M = 9, N = 11, K = 40;
  const Vec A = rnd(size_t(M * K), 300), B = rnd(size_t(K * N), 301);
  Vec exact(size_t(M * N));
  REQUIRE(t.C()->gemm(t.C(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                      exact.data(), N) == DSCPP_OK);
  for (auto [math, bits] : {std::pair{GemmMath::tf32, 11}, {GemmMath::bf16, 8}, {GemmMath::fp16, 11}}) {
    CAPTURE(kernels::gemm_math_name(math));
    t.ctx.gemm_math = math;
    Vec ra = A, rb = B, want(exact.size()), got(exact.size());
    for (float& v : ra) v = kernels::round_for_gemm(v, math);
    for (float& v : rb) v = kernels::round_for_gemm(v, math);
    REQUIRE(t.C()->gemm(t.C(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, ra.data(), K, rb.data(), N, 0.0f,
                        want.data(), N) == DSCPP_OK);
    REQUIRE(t.gpu.gemm(t.G(), DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, got.data(),
                       N) == DSCPP_OK);
    CHECK(bitwise(got, want));
    bool differs = false;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double mag = 0;
        for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(A[size_t(i * K + k)]) * B[size_t(k * N + j)]);
        const size_t ij = size_t(i * N + j);
        REQUIRE(std::fabs(double(got[ij]) - exact[ij]) <= (2 * std::ldexp(1.0, -bits) + double(K) * kU) * mag);
        differs = differs || got[ij] != exact[ij];
      }
    CHECK(differs);
  }
  t.ctx.gemm_math = GemmMath::fp32;
}

// Strided batches under 16-bit math stage the span from the first matrix to the last element of
// the last (operand_span): transposed operands, leading dimensions wider than a row and gaps
// between matrices must all land where cuBLAS reads them. Equal bits to the CPU's strided GEMM
// over the operands rounded by hand.
TEST_CASE("CUDA table (host stub) strided-batched GEMMs on 16-bit math stage every matrix", "[cuda_ops_table]") {
  using kernels::GemmMath;
  Tables t;
  const int64_t M = 5, N = 6, K = 7, batch = 3;
  const int64_t lda = M + 2, sa = lda * K + 3;  // A transposed: stored K × M
  const int64_t ldb = K + 1, sb = ldb * N + 5;  // B transposed: stored N × K
  const int64_t ldc = N + 1, sc = ldc * M;
  const Vec A = rnd(size_t(sa * batch), 310), B = rnd(size_t(sb * batch), 311);
  for (GemmMath math : {GemmMath::bf16, GemmMath::fp16}) {
    CAPTURE(kernels::gemm_math_name(math));
    t.ctx.gemm_math = math;
    Vec ra = A, rb = B, want(size_t(sc * batch), 0.25f), got = want;
    for (float& v : ra) v = kernels::round_for_gemm(v, math);
    for (float& v : rb) v = kernels::round_for_gemm(v, math);
    REQUIRE(t.C()->gemm_strided_batched(t.C(), DSCPP_TRANS, DSCPP_TRANS, M, N, K, 0.5f, ra.data(), lda, sa, rb.data(),
                                        ldb, sb, 1.0f, want.data(), ldc, sc, batch) == DSCPP_OK);
    REQUIRE(t.gpu.gemm_strided_batched(t.G(), DSCPP_TRANS, DSCPP_TRANS, M, N, K, 0.5f, A.data(), lda, sa, B.data(), ldb,
                                       sb, 1.0f, got.data(), ldc, sc, batch) == DSCPP_OK);
    CHECK(bitwise(got, want));
  }
  CHECK(cuda::operand_span(DSCPP_TRANS, M, K, lda, sa, batch) == (batch - 1) * sa + (K - 1) * lda + M);
  CHECK(cuda::operand_span(DSCPP_NO_TRANS, M, K, lda, 0, batch) == (M - 1) * lda + K);  // one shared matrix
  t.ctx.gemm_math = GemmMath::fp32;
}

namespace {
// Forward then backward of the flash entries on the CUDA table (index 0) and the CPU table (1).
struct FlashRun {
  Vec out[2], lse[2], dqkv[2];
};
FlashRun run_flash(const Tables& t, const Vec& qkv, const Vec& dout, int64_t batch, int64_t T, int64_t heads,
                   int64_t head_dim, float scale) {
  FlashRun r;
  const int64_t rows = batch * heads * T;
  for (int k = 0; k < 2; ++k) {
    const dscpp_ops& o = k == 0 ? t.gpu : *t.C();
    r.out[k].assign(dout.size(), kNaN), r.lse[k].assign(size_t(rows), kNaN), r.dqkv[k].assign(qkv.size(), kNaN);
    Vec ws(size_t(rows), kNaN);
    REQUIRE(o.flash_attention_forward(&o, qkv.data(), r.lse[k].data(), r.out[k].data(), batch, T, heads, head_dim,
                                      scale) == DSCPP_OK);
    REQUIRE(o.flash_attention_backward(&o, qkv.data(), r.out[k].data(), r.lse[k].data(), dout.data(), r.dqkv[k].data(),
                                       ws.data(), batch, T, heads, head_dim, scale) == DSCPP_OK);
  }
  return r;
}
// The CUDA table's run (index 0) against the CPU table's: out and dqkv normwise within the sums'
// tolerance at max(T, head_dim) (dqkv: two sums in a row, as for the ABI 2 entries), lse within
// it relative to 1 + |lse| (a log of a T-term sum).
void check_flash(const FlashRun& r, int64_t T, int64_t head_dim) {
  const Vec(&out)[2] = r.out, (&lse)[2] = r.lse, (&dqkv)[2] = r.dqkv;
  const double tol = sum_tol(std::max(T, head_dim));
  CHECK_NORMWISE(out[0], out[1], tol);
  double lse_floor = 0;
  for (float v : lse[1]) lse_floor = std::max(lse_floor, 1.0 + std::fabs(double(v)));
  CHECK_NORMWISE(lse[0], lse[1], tol, lse_floor);
  CHECK_NORMWISE(dqkv[0], dqkv[1], 2 * tol);
}
}  // namespace

// The flash entries: the CUDA table's blockwise attention (blocks of 128 queries on the table's
// GEMMs, ops_attention.cu's row kernels) against the CPU table's exact softmax over the whole
// row. T = 300 takes three blocks of queries (128, 128, 44), the last seeing all 300 keys; head
// widths 7, 32, 64. lse is log of a T-term sum: its error is sum_tol(T) of its terms' size,
// ≤ 1 + |lse| here.
TEST_CASE("CUDA table (host stub) flash attention matches the CPU table's", "[cuda_ops_table]") {
  Tables t;
  for (int64_t T : {1, 6, 40, 300})
    for (int64_t head_dim : {7, 32, 64}) {
      const int64_t batch = 2, heads = 2, C = heads * head_dim;
      const float scale = 1.0f / std::sqrt(float(head_dim));
      CAPTURE(T, head_dim);
      const Vec qkv = rnd(size_t(batch * T * 3 * C), 22, -2.0f, 2.0f), dout = rnd(size_t(batch * T * C), 23);
      check_flash(run_flash(t, qkv, dout, batch, T, heads, head_dim, scale), T, head_dim);
    }
  // Under bf16 math the blockwise path's GEMMs read staged bf16 copies of head-major strided
  // batches: within bf16 rounding of the exact result (gpu_parity's bound for the same case).
  {
    const int64_t batch = 2, T = 150, heads = 2, head_dim = 32, C = heads * head_dim;
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const Vec qkv = rnd(size_t(batch * T * 3 * C), 24, -1.5f, 1.5f), dout = rnd(size_t(batch * T * C), 25);
    t.ctx.gemm_math = kernels::GemmMath::bf16;
    const FlashRun r = run_flash(t, qkv, dout, batch, T, heads, head_dim, scale);
    const Vec(&out)[2] = r.out, (&dqkv)[2] = r.dqkv;
    t.ctx.gemm_math = kernels::GemmMath::fp32;
    CHECK_NORMWISE(out[0], out[1], 2e-2);
    CHECK_NORMWISE(dqkv[0], dqkv[1], 2e-2);
    CHECK_FALSE(bitwise(out[0], out[1]));  // the rounding happened
  }
  Vec a(3 * 4 * 8), l(4), o(4 * 8);
  CHECK(t.gpu.flash_attention_forward(&t.gpu, a.data(), l.data(), o.data(), 1, 2, 2, 8, kNaN) ==
        DSCPP_E_INVALID_ARGUMENT);  // a NaN scale
}

// The tiled kernels (ops_flash.cu; DSCPP_FLASH_ATTENTION=tiled): the same comparison, across
// 64-query tiles (T = 64 one whole tile, 65 a one-row tail, 200 four tiles), head widths on the
// 64-wide instantiation (7: scalar loads, a partial group of four; 32; 64) and the 128-wide
// one (100, 128). Every call must have run as tile launches (the host stub's launch log), not
// the blockwise path's GEMMs. Under AddressSanitizer (an unoptimised build, where the host stub
// runs these kernels ~50x slower: 2 minutes for the whole matrix) T = 6 and 70 at widths 7 and
// 100: both instantiations, scalar and four-float loads, a tail and two tiles; the release
// build runs all of it.
TEST_CASE("CUDA table (host stub) tiled flash attention matches the CPU table's", "[cuda_ops_table]") {
  // What a block needs against what GPUs give one: an A100 163 KB (widths up to 64 run tiled
  // there), an H100 or H200 227 KB (every width up to 128).
  CHECK(cuda::ops::flash_tiles_shared_bytes(64) <= 163 * 1024);
  CHECK(cuda::ops::flash_tiles_shared_bytes(128) <= 227 * 1024);
  CHECK_FALSE(cuda::ops::flash_tiles_fit(1, 8, 1, 129));
  Tables t;
  t.ctx.tiled_attention = true;
#if defined(__SANITIZE_ADDRESS__)
  const std::vector<int64_t> Ts = {6, 70}, widths = {7, 100};
#else
  const std::vector<int64_t> Ts = {1, 6, 64, 65, 200}, widths = {7, 32, 64, 100, 128};
#endif
  for (int64_t T : Ts)
    for (int64_t head_dim : widths) {
      if (T > 128 && head_dim > 64) continue;  // the 128-wide tiles at T = 65 already cross a tile edge
      const int64_t batch = 2, heads = 2, C = heads * head_dim;
      const float scale = 1.0f / std::sqrt(float(head_dim));
      CAPTURE(T, head_dim);
      const Vec qkv = rnd(size_t(batch * T * 3 * C), 26, -2.0f, 2.0f), dout = rnd(size_t(batch * T * C), 27);
      cuda::stub_launches().clear();
      const FlashRun r = run_flash(t, qkv, dout, batch, T, heads, head_dim, scale);
      int tiles = 0;
      for (const cuda::StubLaunch& l : cuda::stub_launches()) tiles += l.kind == "tiles";
      CHECK(tiles == 3);  // forward; dq; dk and dv
      check_flash(r, T, head_dim);
    }
}
