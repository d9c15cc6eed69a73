// Host/device portability for math shared by the CPU loops and the CUDA kernels.
//
// DSCPP_HD marks a function callable from both (`__host__ __device__` under nvcc, nothing
// otherwise). The hd_* helpers below are the float operations the shared update rules use;
// SIMD wrapper types provide overloads with the same names (found by argument-dependent
// lookup), so one template body gives the scalar, AVX2, AVX-512 and CUDA code the same
// sequence of correctly rounded operations: fma, sqrt and division are IEEE-exact on all of
// them, which makes the paths bit-identical where they use the same sequence.
#pragma once

#if defined(__CUDACC__)
#define DSCPP_HD __host__ __device__
#else
#define DSCPP_HD
#include <cmath>
#endif

namespace dscpp::hd {

// One rounding: a·b + c.
DSCPP_HD inline float hd_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#elif defined(__GNUC__)
  return __builtin_fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

DSCPP_HD inline float hd_sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#elif defined(__GNUC__)
  return __builtin_sqrtf(a);
#else
  return std::sqrt(a);
#endif
}

// step·sign(c) with sign(0) = sign(NaN) = 0 (torch.sign; DeepSpeed's Lion leaves the weight
// alone when the interpolated momentum is exactly 0).
DSCPP_HD inline float hd_sign_step(float c, float step) { return c > 0.0f ? step : (c < 0.0f ? -step : 0.0f); }

}  // namespace dscpp::hd
