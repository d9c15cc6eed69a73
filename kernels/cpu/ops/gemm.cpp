// The GEMM entries of the CPU ops table: argument checks, the choice of kernel (dscpp's AVX-512
// kernel where the CPU has it, OpenBLAS otherwise or when DSCPP_GEMM=openblas), and the split
// of one GEMM or a batch of them over the core thread pool.
#include "core/knobs.h"
#include "core/protected_memory.h"
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/cpu/ops/gemm_native.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

namespace dscpp::kernels {
namespace cpu {
namespace {

bool fits_blasint(int64_t v) { return v >= 0 && v <= std::numeric_limits<blasint>::max(); }

// Below this many flops a GEMM stays on the calling thread: waking a worker costs a few
// microseconds, about what 0.5 MFLOP takes on one core.
constexpr double kParallelFlops = 1 << 19;

GemmBackend default_backend() {
  GemmBackend b = gemm_avx512_available() ? GemmBackend::avx512 : GemmBackend::openblas;
  if (const char* env = knob("DSCPP_GEMM"); env && *env) {
    const std::string want = env;
    if (want == "openblas") b = GemmBackend::openblas;
    else if (want == "avx512" && gemm_avx512_available()) b = GemmBackend::avx512;
  }
  return b;
}

std::atomic<int>& backend_slot() {
  static std::atomic<int> slot{static_cast<int>(default_backend())};
  return slot;
}

GemmBackend active_backend() { return static_cast<GemmBackend>(backend_slot().load(std::memory_order_relaxed)); }

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

// The activation over the finished C, row by row (gemm_native.h: act).
void apply_act(const GemmArgs& g) {
  if (g.act == GemmArgs::Act::none) return;
  for (int64_t i = 0; i < g.M; ++i) {
    const int64_t off = i * g.ldc;
    if (g.act == GemmArgs::Act::gelu) gelu_rows(g.C + off, g.act_out + off, g.N);
    else gelu_backward_rows(g.act_in + off, g.C + off, g.C + off, g.N);
  }
}

// C = beta·S (+ bias) without a product: beta = 0 never reads S (NaN-safe, as in BLAS).
void scale_only(const GemmArgs& g) {
  const float* src = g.c_in != nullptr ? g.c_in : g.C;
  for (int64_t i = 0; i < g.M; ++i) {
    float* c = g.C + i * g.ldc;
    const float* s = src + i * g.ldc;
    for (int64_t j = 0; j < g.N; ++j) {
      const float v = g.beta == 0.0f ? 0.0f : g.beta * s[j];
      c[j] = g.bias != nullptr ? v + g.bias[j] : v;
    }
  }
  apply_act(g);
}

// The OpenBLAS path: sgemm, then the epilogues as passes of their own.
void gemm_openblas(const GemmArgs& g) {
  if (g.c_in != nullptr && g.beta != 0.0f)
    for (int64_t i = 0; i < g.M; ++i) std::copy(g.c_in + i * g.ldc, g.c_in + i * g.ldc + g.N, g.C + i * g.ldc);
  // OpenBLAS's own threads cannot be handed a caller's access to protected memory (a cuda-sim
  // kernel's operands, core/protected_memory.h): such a call runs on the calling thread. Only
  // the engine's thread runs GEMMs there, so setting the global count cannot race.
  const int blas_threads = ProtectedAccess::open_here() ? openblas_get_num_threads() : 1;
  if (blas_threads > 1) openblas_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(g.M), static_cast<blasint>(g.N), static_cast<blasint>(g.K), g.alpha, g.A,
              static_cast<blasint>(g.lda), g.B, static_cast<blasint>(g.ldb), g.beta, g.C, static_cast<blasint>(g.ldc));
  if (blas_threads > 1) openblas_set_num_threads(blas_threads);
  if (g.bias != nullptr)
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) g.C[i * g.ldc + j] += g.bias[j];
  apply_act(g);
}

// a_row_sums[i] += Σ_k op(A)(i, k) in k order (the AVX-512 path sums per depth block of 256).
void add_row_sums(const GemmArgs& g) {
  for (int64_t i = 0; i < g.M; ++i) {
    float s = 0.0f;
    for (int64_t k = 0; k < g.K; ++k) s += g.trans_a ? g.A[k * g.lda + i] : g.A[i * g.lda + k];
    g.a_row_sums[i] += s;
  }
}

// One GEMM on the calling thread with the active kernel.
void gemm_serial(const GemmArgs& g, GemmBackend backend) {
  if (g.M == 0 || g.N == 0) {
    if (g.a_row_sums != nullptr && g.M > 0 && g.N == 0) add_row_sums(g);
    return;
  }
  if (g.K == 0 || g.alpha == 0.0f) {
    scale_only(g);
    if (g.a_row_sums != nullptr) add_row_sums(g);
    return;
  }
  if (backend == GemmBackend::avx512) return gemm_avx512_serial(g);
  gemm_openblas(g);
  if (g.a_row_sums != nullptr) add_row_sums(g);
}

// The rows [i0, i1) and columns [j0, j1) of C as a GEMM of their own. Only the block holding
// column 0 adds the row sums of A, so they are counted once.
GemmArgs sub_gemm(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  GemmArgs s = g;
  s.M = i1 - i0;
  s.N = j1 - j0;
  s.A = g.trans_a ? g.A + i0 : g.A + i0 * g.lda;
  s.B = g.trans_b ? g.B + j0 * g.ldb : g.B + j0;
  const int64_t off = i0 * g.ldc + j0;
  s.C = g.C + off;
  if (g.c_in != nullptr) s.c_in = g.c_in + off;
  if (g.act_out != nullptr) s.act_out = g.act_out + off;
  if (g.act_in != nullptr) s.act_in = g.act_in + off;
  if (g.bias != nullptr) s.bias = g.bias + j0;
  if (g.a_row_sums != nullptr) s.a_row_sums = j0 == 0 ? g.a_row_sums + i0 : nullptr;
  return s;
}

// A GEMM with a few rows of op(A) (decoding: a linear layer on the newest token of 1–8
// sequences) reads B once, straight from where it is: each element of C a dot product of an A
// row with a row of B (B transposed, a weight stored [out, in]) or each row of C a combination
// of B's rows. Packing B for the tiled kernel would cost several times the product itself.
constexpr int64_t kSkinnyRows = 8;

bool skinny(const GemmArgs& g) {
  return g.M > 0 && g.M <= kSkinnyRows && g.N > 0 && g.K > 0 && !g.trans_a && g.a_row_sums == nullptr &&
         g.alpha != 0.0f;
}

DSCPP_SIMD float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

DSCPP_SIMD void add_scaled(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Columns [j0, j1) of C.
void skinny_columns(const GemmArgs& g, int64_t j0, int64_t j1) {
  const int64_t w = j1 - j0;
  std::vector<float> acc(static_cast<size_t>(g.M * w), 0.0f);
  if (g.trans_b && gemm_avx512_available()) {
    gemm_avx512_skinny_dots(g, j0, j1, acc.data(), w);
  } else if (g.trans_b) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = 0; i < g.M; ++i) acc[size_t(i * w + j - j0)] = dot(g.A + i * g.lda, g.B + j * g.ldb, g.K);
  } else {
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t i = 0; i < g.M; ++i) add_scaled(g.A[i * g.lda + k], g.B + k * g.ldb + j0, &acc[size_t(i * w)], w);
  }
  const float* src = g.c_in != nullptr ? g.c_in : g.C;
  for (int64_t i = 0; i < g.M; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      float v = g.alpha * acc[size_t(i * w + j - j0)];
      if (g.beta != 0.0f) v += g.beta * src[i * g.ldc + j];
      g.C[i * g.ldc + j] = g.bias != nullptr ? v + g.bias[j] : v;
    }
}

void gemm_skinny(const GemmArgs& g) {
  // Columns per chunk: about 64 KiB of B each, so a chunk is worth a worker's wake-up.
  const int64_t chunk = std::max<int64_t>(16, (int64_t{1} << 14) / std::max<int64_t>(1, g.K));
  dscpp::parallel_for((g.N + chunk - 1) / chunk, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) skinny_columns(g, c * chunk, std::min(g.N, (c + 1) * chunk));
  });
  apply_act(g);
}

}  // namespace

void gemm_f32(const GemmArgs& g) {
  if (skinny(g)) return gemm_skinny(g);
  const GemmBackend backend = active_backend();
  const int threads = dscpp::num_threads();
  const double flops = 2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  // OpenBLAS threads itself (openblas_set_num_threads); ours splits C into one block per
  // thread, along the longer side in whole tiles (12 rows or 32 columns), so no two threads write
  // one tile and each packs only the operand parts it reads.
  if (backend != GemmBackend::avx512 || threads <= 1 || flops < kParallelFlops) return gemm_serial(g, backend);
  GemmArgs whole = g;
  if (whole.depth_block == 0) whole.depth_block = gemm_avx512_depth_block(g);
  const bool split_rows = g.M >= g.N;
  const int64_t extent = split_rows ? g.M : g.N, tile = split_rows ? kGemmTileRows : kGemmTileCols;
  const int64_t tiles = (extent + tile - 1) / tile;
  const int64_t parts = std::min<int64_t>(threads, tiles);
  dscpp::parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = std::min(extent, tiles * p / parts * tile),
                    e = std::min(extent, tiles * (p + 1) / parts * tile);
      if (b >= e) continue;
      gemm_serial(split_rows ? sub_gemm(whole, b, e, 0, g.N) : sub_gemm(whole, 0, g.M, b, e), backend);
    }
  });
}

void gemm_f32_batched(const GemmArgs& g, int64_t stride_a, int64_t stride_b, int64_t stride_c, int64_t batch) {
  const GemmBackend backend = active_backend();
  auto one = [&](int64_t i) {
    GemmArgs s = g;
    s.A = g.A + i * stride_a;
    s.B = g.B + i * stride_b;
    s.C = g.C + i * stride_c;
    return s;
  };
  const int threads = dscpp::num_threads();
  const double flops = 2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  // Whole GEMMs per thread when there are enough of them; otherwise split each one.
  if (backend == GemmBackend::avx512 && batch >= threads && flops * static_cast<double>(batch) >= kParallelFlops) {
    dscpp::parallel_for(batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) gemm_serial(one(i), backend);
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i) gemm_f32(one(i));
}

GemmArgs make_args(dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc) {
  GemmArgs g;
  g.trans_a = ta == DSCPP_TRANS;
  g.trans_b = tb == DSCPP_TRANS;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.A = static_cast<const float*>(A);
  g.lda = lda;
  g.B = static_cast<const float*>(B);
  g.ldb = ldb;
  g.beta = beta;
  g.C = static_cast<float*>(C);
  g.ldc = ldc;
  return g;
}

namespace op {

int gemm(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
         const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc) {
  if (int s = check_table(o)) return s;
  if (int s = check_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc)) return s;
  gemm_f32(make_args(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
  return DSCPP_OK;
}

int gemm_strided_batched(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N,
                         int64_t K, float alpha, const void* A, int64_t lda, int64_t stride_a, const void* B,
                         int64_t ldb, int64_t stride_b, float beta, void* C, int64_t ldc, int64_t stride_c,
                         int64_t batch) {
  if (int s = check_table(o)) return s;
  if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0) return DSCPP_E_INVALID_ARGUMENT;
  if (batch == 0) return DSCPP_OK;
  if (int s = check_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc)) return s;
  gemm_f32_batched(make_args(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), stride_a, stride_b, stride_c,
                   batch);
  return DSCPP_OK;
}

}  // namespace op

}  // namespace cpu

GemmBackend gemm_backend() { return cpu::active_backend(); }

bool gemm_backend_available(GemmBackend b) { return b == GemmBackend::openblas || cpu::gemm_avx512_available(); }

void set_gemm_backend(GemmBackend b) {
  if (!gemm_backend_available(b))
    throw std::invalid_argument("gemm backend avx512: this CPU lacks AVX-512 F/VL/DQ/BW");
  cpu::backend_slot().store(static_cast<int>(b));
}

std::string gemm_description() {
  return gemm_backend() == GemmBackend::avx512 ? "dscpp AVX-512 (12x32 tiles)" : "OpenBLAS sgemm";
}

}  // namespace dscpp::kernels
