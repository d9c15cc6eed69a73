// CPU optimizer loops: the update rules of kernels/optimizer_math.h over flat fp32 arrays,
// vectorised (AVX-512 or AVX2+FMA, chosen once at run time from the CPU's features, scalar
// otherwise) and split over the core thread pool (dscpp::parallel_for, num_threads()).
//
// Every path evaluates the same sequence of correctly rounded fp32 operations per element, so
// the scalar, AVX2 and AVX-512 results are bit-identical, whatever the thread count (LAMB's
// norms are sums in double whose order depends on the vector width: its trust ratios agree
// to about 1e-15 relative across paths).
#pragma once

#include "kernels/optimizer_math.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::kernels::cpu {

// "avx512", "avx2" or "scalar": the level the loops use. Chosen once, on first use: AVX2 when
// the CPU has it (faster than AVX-512 for these memory-bound loops, see optim_cpu.cpp), else
// scalar; DSCPP_OPTIM_SIMD=scalar|avx2|avx512 selects another level the CPU supports.
std::string optimizer_simd_level();
// Levels this CPU and build can run, best first (always ends with "scalar").
std::vector<std::string> optimizer_simd_levels();
// Forces a level (tests, benchmarks). Throws dscpp::Error if the CPU or build lacks it.
void set_optimizer_simd_level(const std::string& level);

// In place over n elements. `w`, `m`, `v`, `buf`, `sum` are updated; `g` is read.
void adam_step(float* w, const float* g, float* m, float* v, int64_t n, const AdamCoeffs<float>& c);
// sgd_step leaves `buf` unused without momentum.
void sgd_step(float* w, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c);
void adagrad_step(float* w, const float* g, float* sum, int64_t n, const AdagradCoeffs<float>& c);
void lion_step(float* w, const float* g, float* m, int64_t n, const LionCoeffs<float>& c);

// LAMB over segments that tile [0, n): bounds[0] = 0 < bounds[1] < ... < bounds[k] = n, one
// trust ratio per segment [bounds[i], bounds[i+1]). Σw², Σu² accumulate in fp32 blocks of
// ≤ 4096 elements summed in double. `step_size` from lamb_step_size(). When `ratios` is
// given it receives the k trust ratios used.
void lamb_step(float* w, const float* g, float* m, float* v, const std::vector<int64_t>& bounds,
               const LambCoeffs<float>& c, double step_size, double min_coeff, double max_coeff,
               std::vector<double>* ratios = nullptr);

// Benchmark baseline: one fused pass with Adam's traffic (read w, g, m, v; write w, m, v) and
// trivial arithmetic, vectorised and threaded like adam_step: the machine's practical limit.
void traffic_step(float* w, const float* g, float* m, float* v, int64_t n);

// ---- per-ISA span kernels (single-threaded, any alignment) --------------------------------
// Internal: one table per instruction set, selected by the dispatcher in optim_cpu.cpp.
struct SpanKernels {
  void (*adam)(float* w, const float* g, float* m, float* v, int64_t n, const AdamCoeffs<float>& c);
  void (*sgd)(float* w, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c);
  void (*adagrad)(float* w, const float* g, float* sum, int64_t n, const AdagradCoeffs<float>& c);
  void (*lion)(float* w, const float* g, float* m, int64_t n, const LionCoeffs<float>& c);
  // Updates m, v; adds Σw², Σu² of the span to *w_sq, *u_sq.
  void (*lamb_moments)(const float* w, const float* g, float* m, float* v, int64_t n, const LambCoeffs<float>& c,
                       double* w_sq, double* u_sq);
  void (*lamb_apply)(float* w, const float* m, const float* v, int64_t n, float neg_step, const LambCoeffs<float>& c);
  void (*traffic)(float* w, const float* g, float* m, float* v, int64_t n);
};

const SpanKernels& span_kernels_scalar();
const SpanKernels& span_kernels_avx2();    // defined only in x86-64 builds
const SpanKernels& span_kernels_avx512();  // defined only in x86-64 builds

}  // namespace dscpp::kernels::cpu
