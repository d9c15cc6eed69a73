// AVX-512F span loops (compiled with -mavx512f -mfma; called only when the CPU has them).
// GCC 12 reports its own _mm512_undefined_* placeholders (vsqrtps, vcvtps2pd, vextractf64x4)
// as maybe-uninitialized when inlined; a known false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/optim/span_loops.h"

namespace dscpp::kernels::cpu {
namespace {

struct V16 {
  static constexpr int64_t width = 16;
  __m512 x;
  V16() = default;
  explicit V16(float f) : x(_mm512_set1_ps(f)) {}
  explicit V16(__m512 v) : x(v) {}
  static V16 load(const float* p) { return V16(_mm512_loadu_ps(p)); }
  void store(float* p) const { _mm512_storeu_ps(p, x); }
  struct Acc {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  };
};
inline V16 operator+(V16 a, V16 b) { return V16(_mm512_add_ps(a.x, b.x)); }
inline V16 operator-(V16 a, V16 b) { return V16(_mm512_sub_ps(a.x, b.x)); }
inline V16 operator*(V16 a, V16 b) { return V16(_mm512_mul_ps(a.x, b.x)); }
inline V16 operator/(V16 a, V16 b) { return V16(_mm512_div_ps(a.x, b.x)); }
inline V16 operator-(V16 a) {  // sign flip, like scalar negation (also of zeros and NaNs)
  return V16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.x), _mm512_set1_epi32(INT32_MIN))));
}
inline V16 hd_fma(V16 a, V16 b, V16 c) { return V16(_mm512_fmadd_ps(a.x, b.x, c.x)); }
inline V16 hd_sqrt(V16 a) { return V16(_mm512_sqrt_ps(a.x)); }
inline V16 hd_sign_step(V16 c, V16 step) {
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 gt = _mm512_cmp_ps_mask(c.x, zero, _CMP_GT_OQ);
  __mmask16 lt = _mm512_cmp_ps_mask(c.x, zero, _CMP_LT_OQ);
  __m512 r = _mm512_maskz_mov_ps(gt, step.x);
  return V16(_mm512_mask_mov_ps(r, lt, (-step).x));
}
inline void acc_sq(V16::Acc& a, V16 x) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x.x));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x.x), 1)));
  a.lo = _mm512_fmadd_pd(lo, lo, a.lo);
  a.hi = _mm512_fmadd_pd(hi, hi, a.hi);
}
inline double hsum(const V16::Acc& a) {
  alignas(64) double l[8], h[8];
  _mm512_store_pd(l, a.lo);
  _mm512_store_pd(h, a.hi);
  double s = 0;
  for (int k = 0; k < 8; ++k) s += l[k] + h[k];
  return s;
}

}  // namespace

const SpanKernels& span_kernels_avx512() {
  static const SpanKernels k = make_span_kernels<V16>();
  return k;
}

}  // namespace dscpp::kernels::cpu
