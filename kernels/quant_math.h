// DeepSpeed's symmetric block int8 quantization (ZeRO++ qwZ), shared by the
// CPU loop (kernels/cpu/quant) and the CUDA kernels (kernels/cuda/quant.cu).
//
// A tensor of N elements is cut into `groups` contiguous groups of N/groups elements. Per
// group: s = 2^8/(2·absmax) (s = 1 when absmax is 0), q = clamp(rint(x·s), −128, 127), stored
// scale 1/s, dequantized value q·(1/s). The error is at most absmax/256 per element, plus the
// +absmax → 127 clamp (absmax·s = 128 does not fit).
#pragma once

#include "kernels/hd.h"

#include <cstdint>

namespace dscpp::hd {

// Round to nearest, ties to even (the current rounding mode, which nobody changes), like rint.
DSCPP_HD inline float hd_rint(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#elif defined(__GNUC__)
  return __builtin_rintf(a);
#else
  return std::rint(a);
#endif
}

// One step of the group's |x| maximum. NaN compares false and is skipped: quantization assumes
// finite input (the engine checks overflow before any quantized collective).
DSCPP_HD inline float quant_absmax_step(float acc, float x) {
  const float a = x < 0.0f ? -x : x;
  return a > acc ? a : acc;
}

// Quantization multiplier s for a group's absmax.
DSCPP_HD inline float quant_scale(float absmax) {
  return absmax == 0.0f ? 1.0f : 256.0f / (2.0f * absmax);
}

DSCPP_HD inline int8_t quantize_int8(float x, float scale) {
  float q = hd_rint(x * scale);
  q = q < -128.0f ? -128.0f : q;
  q = q > 127.0f ? 127.0f : q;
  return static_cast<int8_t>(q);
}

// `inv_scale` is the stored 1/s.
DSCPP_HD inline float dequantize_int8(int8_t q, float inv_scale) {
  return static_cast<float>(q) * inv_scale;
}

// qgZ's int4 (DeepSpeed's 4-bit symmetric quantizer): s = 2^4/(2·absmax), q in [−8, 7], two
// values a byte, the even element in the low nibble.
DSCPP_HD inline float quant_scale_int4(float absmax) {
  return absmax == 0.0f ? 1.0f : 16.0f / (2.0f * absmax);
}
DSCPP_HD inline uint8_t quantize_int4_pair(float x0, float x1, float scale) {
  auto level = [](float v) {
    v = v < -8.0f ? -8.0f : v;
    v = v > 7.0f ? 7.0f : v;
    return static_cast<unsigned>(static_cast<int>(v)) & 0xFu;
  };
  return static_cast<uint8_t>(level(hd_rint(x0 * scale)) | (level(hd_rint(x1 * scale)) << 4));
}
// The value of nibble `high` (0 low, 1 high) of a packed byte; `inv_scale` is the stored 1/s.
DSCPP_HD inline float dequantize_int4(uint8_t pair, int high, float inv_scale) {
  const int nibble = high ? (pair >> 4) : (pair & 0xF);
  return static_cast<float>(nibble >= 8 ? nibble - 16 : nibble) * inv_scale;
}

// DeepSpeed's group count for a tensor of n elements: start at ceil(n/8000),
// increase until n is divisible by 8·groups (or groups = n), then double while n is divisible by 16·groups
// and n/groups > 8000. Returns 0 for n ≤ 0. DeepSpeed asserts the group size stays below
// 16000; the callers check that (quant_group_size_ok) and say which tensor broke it.
inline int64_t qwz_group_count(int64_t n) {
  if (n <= 0) return 0;
  int64_t g = (n + 7999) / 8000;
  while (n % (8 * g) != 0 && g < n) ++g;  // n not divisible by 8: ends at one element per group
  while (n % (16 * g) == 0 && n / g > 8000) g *= 2;
  return g;
}
inline bool quant_group_size_ok(int64_t n, int64_t groups) {
  return groups > 0 && n / groups < 16000;
}

}  // namespace dscpp::hd
