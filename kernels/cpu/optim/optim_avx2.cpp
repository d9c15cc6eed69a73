// AVX2 + FMA span loops (compiled with -mavx2 -mfma; called only when the CPU has them).
#include "kernels/cpu/optim/span_loops.h"

#include <immintrin.h>

namespace dscpp::kernels::cpu {
namespace {

struct V8 {
  static constexpr int64_t width = 8;
  __m256 x;
  V8() = default;
  explicit V8(float f) : x(_mm256_set1_ps(f)) {}
  explicit V8(__m256 v) : x(v) {}
  static V8 load(const float* p) { return V8(_mm256_loadu_ps(p)); }
  void store(float* p) const { _mm256_storeu_ps(p, x); }
  struct Acc {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  };
};
inline V8 operator+(V8 a, V8 b) { return V8(_mm256_add_ps(a.x, b.x)); }
inline V8 operator-(V8 a, V8 b) { return V8(_mm256_sub_ps(a.x, b.x)); }
inline V8 operator*(V8 a, V8 b) { return V8(_mm256_mul_ps(a.x, b.x)); }
inline V8 operator/(V8 a, V8 b) { return V8(_mm256_div_ps(a.x, b.x)); }
inline V8 operator-(V8 a) { return V8(_mm256_xor_ps(a.x, _mm256_set1_ps(-0.0f))); }
inline V8 hd_fma(V8 a, V8 b, V8 c) { return V8(_mm256_fmadd_ps(a.x, b.x, c.x)); }
inline V8 hd_sqrt(V8 a) { return V8(_mm256_sqrt_ps(a.x)); }
inline V8 hd_sign_step(V8 c, V8 step) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 gt = _mm256_cmp_ps(c.x, zero, _CMP_GT_OQ);
  __m256 lt = _mm256_cmp_ps(c.x, zero, _CMP_LT_OQ);
  return V8(_mm256_or_ps(_mm256_and_ps(gt, step.x), _mm256_and_ps(lt, (-step).x)));
}
inline void acc_sq(V8::Acc& a, V8 x) {
  __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x.x));
  __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x.x, 1));
  a.lo = _mm256_fmadd_pd(lo, lo, a.lo);
  a.hi = _mm256_fmadd_pd(hi, hi, a.hi);
}
inline double hsum(const V8::Acc& a) {
  alignas(32) double l[4], h[4];
  _mm256_store_pd(l, a.lo);
  _mm256_store_pd(h, a.hi);
  double s = 0;
  for (int k = 0; k < 4; ++k) s += l[k] + h[k];
  return s;
}

}  // namespace

const SpanKernels& span_kernels_avx2() {
  static const SpanKernels k = make_span_kernels<V8>();
  return k;
}

}  // namespace dscpp::kernels::cpu
