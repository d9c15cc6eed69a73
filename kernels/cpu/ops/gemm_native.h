// dscpp's own fp32 GEMM kernels (private to kernels/cpu/ops). Row-major, BLAS semantics:
// C[M×N] = alpha·op(A)·op(B) + beta·C (+ bias[j] on every row when bias is set); beta = 0
// never reads C. lda/ldb/ldc are the row strides of the stored matrices.
#pragma once

#include <cstdint>

namespace dscpp::kernels::cpu {

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
};

// Whether this CPU runs the AVX-512 kernel (F, VL, DQ, BW).
bool gemm_avx512_available();
// One thread, any shape with M, N ≥ 1 and K ≥ 1 (callers handle the empty cases).
void gemm_avx512_serial(const GemmArgs& g);

// Any shape (empty ones included), with the active backend (cpu_ops.h: gemm_backend()), split
// over the core thread pool when large enough. Arguments are not checked here.
void gemm_f32(const GemmArgs& g);
// `batch` GEMMs; GEMM i reads A + i·stride_a, B + i·stride_b and writes C + i·stride_c.
void gemm_f32_batched(const GemmArgs& g, int64_t stride_a, int64_t stride_b, int64_t stride_c, int64_t batch);

}  // namespace dscpp::kernels::cpu
