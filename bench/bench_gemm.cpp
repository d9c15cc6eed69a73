// fp32 GEMM throughput on the gpt example's linear-layer shapes (4 layers, d_model 256, micro-batch
// 16 × context 128 = 2048 token rows): dscpp's AVX-512 kernel against OpenBLAS's sgemm, both
// through the CPU ops table (kernels/cpu/ops), in the same run, alternating.
//
// Operands are 64-byte aligned and rotate through enough copies to exceed the L3 cache, as in
// training, where every activation arrives from DRAM. Each shape reports the best of --reps
// passes, in GFLOP/s.
//
//   bench_gemm [--threads T=1] [--reps R=5]
// OPENBLAS_CORETYPE applies to the OpenBLAS side as usual (the run prints the core it chose).
// Both are also put against the core's FMA peak, measured by a loop of independent register-only
// FMAs (no loads): the ceiling no fp32 GEMM on this core can pass. `bench_gemm --peak` prints
// only that figure (bench_train_gpt.sh uses it).
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

using dscpp::kernels::GemmBackend;

struct Shape {
  const char* what;
  dscpp_transpose ta, tb;
  int64_t M, N, K;
  float beta;
};

// The GEMMs of one transformer block's linear layers: forward y = x·Wᵀ, backward dW += dyᵀ·x and
// dx = dy·W, for c_attn (256→768), attn.c_proj (256→256), c_fc (256→1024), mlp.c_proj (1024→256).
const Shape kShapes[] = {
    {"c_attn  fwd  x·Wt", DSCPP_NO_TRANS, DSCPP_TRANS, 2048, 768, 256, 0},
    {"c_proj  fwd  x·Wt", DSCPP_NO_TRANS, DSCPP_TRANS, 2048, 256, 256, 0},
    {"c_fc    fwd  x·Wt", DSCPP_NO_TRANS, DSCPP_TRANS, 2048, 1024, 256, 0},
    {"mlp_prj fwd  x·Wt", DSCPP_NO_TRANS, DSCPP_TRANS, 2048, 256, 1024, 0},
    {"c_attn  dW  dyt·x", DSCPP_TRANS, DSCPP_NO_TRANS, 768, 256, 2048, 1},
    {"c_fc    dW  dyt·x", DSCPP_TRANS, DSCPP_NO_TRANS, 1024, 256, 2048, 1},
    {"mlp_prj dW  dyt·x", DSCPP_TRANS, DSCPP_NO_TRANS, 256, 1024, 2048, 1},
    {"c_attn  dx   dy·W", DSCPP_NO_TRANS, DSCPP_NO_TRANS, 2048, 256, 768, 0},
    {"c_fc    dx   dy·W", DSCPP_NO_TRANS, DSCPP_NO_TRANS, 2048, 256, 1024, 0},
    {"mlp_prj dx   dy·W", DSCPP_NO_TRANS, DSCPP_NO_TRANS, 2048, 1024, 256, 0},
};

// 64-byte aligned, as the runtime's device memory is (Device::allocate): a std::vector's large
// blocks come from mmap 16 bytes past a page boundary, which splits every 64-byte store of C
// across two cache lines and cost the AVX-512 kernel ~10% here.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  friend bool operator==(const Aligned64&, const Aligned64&) { return true; }
};
using Floats = std::vector<float, Aligned64<float>>;

struct Operands {
  Floats A, B, C;
};

// FMA throughput of one core, GFLOP/s: 12 independent accumulator chains (more than FMA latency
// × issue width on current x86 cores), best of 5 runs of ~0.1 s. 512-bit FMAs where the CPU has
// AVX-512 (the width dscpp's kernel uses), else 256-bit. The sums go to a volatile, so the
// compiler keeps every FMA. A macro because each width needs its own target attribute.
#define DSCPP_FMA_PEAK(NAME, TARGET, V, SET1, FMA)                                             \
  __attribute__((target(TARGET))) double NAME() {                                            \
    double best = 0;                                                                         \
    for (int run = 0; run < 5; ++run) {                                                      \
      const V one = SET1(1.0f), tiny = SET1(1e-30f);                                         \
      V acc[12];                                                                             \
      for (V& a : acc) a = one;                                                              \
      constexpr long kIters = 20'000'000;                                                    \
      const auto t0 = std::chrono::steady_clock::now();                                      \
      for (long it = 0; it < kIters; ++it) {                                                 \
        _Pragma("GCC unroll 12") for (V& a : acc) a = FMA(a, one, tiny);                    \
      }                                                                                      \
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); \
      volatile float sink = 0;                                                               \
      for (const V& a : acc) sink = sink + a[0];                                             \
      best = std::max(best, 12.0 * kIters * 2 * (sizeof(V) / 4) / sec / 1e9);                \
    }                                                                                        \
    return best;                                                                             \
  }
DSCPP_FMA_PEAK(fma_peak512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps)
DSCPP_FMA_PEAK(fma_peak256, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps)
#undef DSCPP_FMA_PEAK
double fma_peak() {
  if (__builtin_cpu_supports("avx512f")) return fma_peak512();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? fma_peak256() : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--peak") {
      std::printf("FMA peak of one core: %.1f GFLOP/s\n", fma_peak());
      return 0;
    }
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gemm [--threads T=1] [--reps R=5] | --peak\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "bench_gemm: --threads and --reps want integers >= 1\n");
    return 2;
  }
  dscpp::kernels::set_cpu_threads(threads);
  const dscpp_ops ops = dscpp::kernels::cpu_ops(DSCPP_F32);
  dscpp::kernels::set_gemm_backend(GemmBackend::openblas);
  const bool have_avx512 = [] {
    try {
      dscpp::kernels::set_gemm_backend(GemmBackend::avx512);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }();
  std::printf("%s\n", dscpp::kernels::blas_description().c_str());
  if (!have_avx512) std::printf("this CPU has no AVX-512: only OpenBLAS runs, no ratio\n");
  std::printf("%-18s %5s %5s %5s  %10s  %10s  %s\n", "GEMM", "M", "N", "K", "OpenBLAS", "dscpp", "ratio (GFLOP/s)");
  double total[2] = {0, 0}, flops_total = 0;
  for (const Shape& s : kShapes) {
    const int64_t lda = s.ta == DSCPP_TRANS ? s.M : s.K, ldb = s.tb == DSCPP_TRANS ? s.K : s.N;
    const int64_t bytes = 4 * (s.M * s.K + s.K * s.N + s.M * s.N);
    const int copies = static_cast<int>(std::max<int64_t>(4, (int64_t{160} << 20) / bytes));  // > 160 MiB in all
    std::vector<Operands> ops_copies(copies);
    for (int c = 0; c < copies; ++c) {
      ops_copies[c].A.assign(s.M * s.K, 0.001f * static_cast<float>(c % 7 + 1));
      ops_copies[c].B.assign(s.K * s.N, 0.5f);
      ops_copies[c].C.assign(s.M * s.N, 0.0f);
    }
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; ++r)
      for (int be = 0; be < (have_avx512 ? 2 : 1); ++be) {
        dscpp::kernels::set_gemm_backend(be == 0 ? GemmBackend::openblas : GemmBackend::avx512);
        const auto t0 = std::chrono::steady_clock::now();
        for (Operands& o : ops_copies)
          ops.gemm(&ops, s.ta, s.tb, s.M, s.N, s.K, 1.0f, o.A.data(), lda, o.B.data(), ldb, s.beta, o.C.data(), s.N);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / copies;
        best[be] = std::min(best[be], sec);
      }
    const double flops = 2.0 * static_cast<double>(s.M * s.N * s.K);
    flops_total += flops;
    total[0] += best[0];
    total[1] += best[1];
    if (have_avx512)
      std::printf("%-18s %5lld %5lld %5lld  %10.1f  %10.1f  %.2fx\n", s.what, static_cast<long long>(s.M),
                  static_cast<long long>(s.N), static_cast<long long>(s.K), flops / best[0] / 1e9,
                  flops / best[1] / 1e9, best[0] / best[1]);
    else
      std::printf("%-18s %5lld %5lld %5lld  %10.1f\n", s.what, static_cast<long long>(s.M),
                  static_cast<long long>(s.N), static_cast<long long>(s.K), flops / best[0] / 1e9);
  }
  if (have_avx512)
    std::printf("all shapes, %d thread%s: OpenBLAS %.1f GFLOP/s, dscpp %.1f GFLOP/s, ratio %.2fx\n", threads,
                threads == 1 ? "" : "s", flops_total / total[0] / 1e9, flops_total / total[1] / 1e9,
                total[0] / total[1]);
  if (const double peak = fma_peak() * threads; peak > 0) {
    std::printf("FMA peak of %d core%s: %.1f GFLOP/s; OpenBLAS at %.0f%% of it", threads, threads == 1 ? "" : "s",
                peak, 100 * flops_total / total[0] / 1e9 / peak);
    if (have_avx512) std::printf(", dscpp at %.0f%%", 100 * flops_total / total[1] / 1e9 / peak);
    std::printf("\n");
  }
  return 0;
}
