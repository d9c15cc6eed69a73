// dscpp's fp32 GEMM (private to kernels/cpu/ops). Row-major, BLAS semantics plus the epilogues
// a linear layer needs (cuBLASLt's EPILOGUE_BIAS / GELU_AUX / DGELU / BGRADA, in one pass over C):
//   C = alpha·op(A)·op(B) + beta·S + bias      S = c_in when set, else C; beta = 0 never reads S
//   then act = gelu:          act_out = gelu(C)       (C keeps the pre-activation)
//        act = gelu_backward: C = C ⊙ gelu'(act_in)
//   and a_row_sums[i] += Σ_k op(A)(i, k) when set (a linear layer's bias gradient).
// lda/ldb/ldc are the row strides of the stored matrices; c_in, act_out, act_in use ldc.
#pragma once

#include "dscpp/model.h"

#include <cstdint>

namespace dscpp::kernels::cpu {

// The AVX-512 kernel's C tile: threads split a GEMM on whole tiles (gemm_avx512_kernels.h).
inline constexpr int64_t kGemmTileRows = 12, kGemmTileCols = 32;

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;  // [N] or null
  const float* c_in = nullptr;
  enum class Act { none, gelu, gelu_backward } act = Act::none;
  float* act_out = nullptr;
  const float* act_in = nullptr;
  float* a_row_sums = nullptr;  // [M] or null
  // The AVX-512 kernel's depth blocking, which decides where partial sums round into C: set
  // for the whole GEMM before threads split it, so every split sums in the same order (0: from
  // this GEMM's own shape, gemm_avx512_depth_block).
  int64_t depth_block = 0;
};

// C[M×N] = alpha·op(A)·op(B) + beta·C with no epilogue: the fields every GEMM sets; callers
// add bias, residual, activation or row sums to the result.
GemmArgs make_args(dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc);

// Whether this CPU runs the AVX-512 kernel (F, VL, DQ, BW).
bool gemm_avx512_available();
// One thread, any shape with M, N ≥ 1 and K ≥ 1 (callers handle the empty cases).
void gemm_avx512_serial(const GemmArgs& g);
int64_t gemm_avx512_depth_block(const GemmArgs& g);
// A few rows (1 ≤ M ≤ 8) of A against B transposed (a weight stored [out, in]): acc[i·w + j − j0] =
// A row i · B row j for the columns j0 ≤ j < j1 of C.
void gemm_avx512_skinny_dots(const GemmArgs& g, int64_t j0, int64_t j1, float* acc, int64_t w);

// Any shape (empty ones included), with the active backend (cpu_ops.h: gemm_backend()), split
// over the core thread pool when large enough. Arguments are not checked here.
void gemm_f32(const GemmArgs& g);
// `batch` GEMMs; GEMM i reads A + i·stride_a, B + i·stride_b and writes C + i·stride_c.
void gemm_f32_batched(const GemmArgs& g, int64_t stride_a, int64_t stride_b, int64_t stride_c, int64_t batch);

}  // namespace dscpp::kernels::cpu
