// The CPU ops table: GEMMs straight onto OpenBLAS (no packing or copies of our own: its
// kernels already pack into their cache blocks), host copies, and the thread/BLAS settings.
#include "kernels/cpu/ops/cpu_ops.h"

#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace dscpp::kernels {
namespace cpu {
namespace {

bool fits_blasint(int64_t v) { return v >= 0 && v <= std::numeric_limits<blasint>::max(); }

// Shapes and leading dimensions of one GEMM as the model.h contract states them (row-major,
// lda is the row stride of A as stored, i.e. before op()).
int check_gemm(dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, const void* A,
               int64_t lda, const void* B, int64_t ldb, const void* C, int64_t ldc) {
  if ((ta != DSCPP_NO_TRANS && ta != DSCPP_TRANS) || (tb != DSCPP_NO_TRANS && tb != DSCPP_TRANS))
    return DSCPP_E_INVALID_ARGUMENT;
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (!fits_blasint(v)) return DSCPP_E_INVALID_ARGUMENT;
  const int64_t a_cols = ta == DSCPP_NO_TRANS ? K : M;
  const int64_t b_cols = tb == DSCPP_NO_TRANS ? N : K;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) || ldc < std::max<int64_t>(1, N))
    return DSCPP_E_INVALID_ARGUMENT;
  if (bad_ptr(C, M * N) || bad_ptr(A, M * K) || bad_ptr(B, K * N)) return DSCPP_E_INVALID_ARGUMENT;
  return DSCPP_OK;
}

void gemm_unchecked(dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    // BLAS semantics without a BLAS call: C = beta·C, and beta = 0 never reads C (NaN-safe).
    for (int64_t i = 0; i < M; ++i) {
      float* c = C + i * ldc;
      if (beta == 0.0f)
        std::fill(c, c + N, 0.0f);
      else if (beta != 1.0f)
        for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, ta == DSCPP_TRANS ? CblasTrans : CblasNoTrans,
              tb == DSCPP_TRANS ? CblasTrans : CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

int gemm(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
         const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc) {
  if (int s = check_table(o)) return s;
  if (int s = check_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc)) return s;
  gemm_unchecked(ta, tb, M, N, K, alpha, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb, beta,
                 static_cast<float*>(C), ldc);
  return DSCPP_OK;
}

// OpenBLAS 0.3.21 has no strided-batched sgemm, so this is a loop of sgemm calls; each call
// picks its own thread count (small attention GEMMs stay single-threaded inside OpenBLAS).
int gemm_strided_batched(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N,
                         int64_t K, float alpha, const void* A, int64_t lda, int64_t stride_a, const void* B,
                         int64_t ldb, int64_t stride_b, float beta, void* C, int64_t ldc, int64_t stride_c,
                         int64_t batch) {
  if (int s = check_table(o)) return s;
  if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0) return DSCPP_E_INVALID_ARGUMENT;
  if (batch == 0) return DSCPP_OK;
  if (int s = check_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc)) return s;
  const auto* a = static_cast<const float*>(A);
  const auto* b = static_cast<const float*>(B);
  auto* c = static_cast<float*>(C);
  for (int64_t i = 0; i < batch; ++i)
    gemm_unchecked(ta, tb, M, N, K, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
  return DSCPP_OK;
}

// Device memory is host memory on the CPU; memmove because a caller may pass one buffer twice.
int to_host(const dscpp_ops* o, const void* src, void* dst, size_t bytes) {
  if (int s = check_table(o)) return s;
  if (bytes > 0 && (src == nullptr || dst == nullptr)) return DSCPP_E_INVALID_ARGUMENT;
  if (bytes > 0) std::memmove(dst, src, bytes);
  return DSCPP_OK;
}

}  // namespace

void fill_blas_ops(dscpp_ops& t) {
  t.gemm = gemm;
  t.gemm_strided_batched = gemm_strided_batched;
  t.to_host = to_host;
  t.from_host = to_host;
}

}  // namespace cpu

dscpp_ops cpu_ops(dscpp_dtype dtype, void* device) {
  dscpp_ops t{};
  t.struct_size = static_cast<uint32_t>(sizeof(dscpp_ops));
  t.dtype = dtype;
  t.device = device;
  // One set of functions for every dtype: each op checks `dtype` first, so a table for a dtype
  // without kernels answers DSCPP_E_UNSUPPORTED from every entry instead of holding NULLs.
  cpu::fill_blas_ops(t);
  cpu::fill_elementwise_ops(t);
  cpu::fill_row_ops(t);
  return t;
}

void set_cpu_threads(int n) {
  n = std::max(1, n);
  openblas_set_num_threads(n);
  dscpp::set_num_threads(n);
}

std::string blas_description() {
  // The config string starts with "OpenBLAS <version>" and lists the build options.
  const char* config = openblas_get_config();
  std::string s = config ? config : "OpenBLAS (no config)";
  const char* core = openblas_get_corename();
  s += ", core ";
  s += core ? core : "unknown";
  if (const char* env = std::getenv("OPENBLAS_CORETYPE"); env && *env) {
    s += " (OPENBLAS_CORETYPE=";
    s += env;
    s += ")";
  }
  const int threads = openblas_get_num_threads();
  s += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  return s;
}

}  // namespace dscpp::kernels
