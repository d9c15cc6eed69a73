// fp16 (IEEE-754 binary16) and bf16 (bfloat16) conversions, shared by the CPU and CUDA paths.
//
// This header is the single source of the conversion math: `core/dtype.cpp` loops over these
// functions on the CPU and `kernels/cuda/cast.cu` calls the same functions on the device, so
// the CPU tests (tests/unit/test_dtype.cpp) check the device math too, and
// `dscpp-cuda-check` compares the two bit for bit on a real GPU.
//
// Contract, for every input:
//   * float -> fp16/bf16 rounds to nearest, ties to even; values that round past the largest
//     finite number become +-Inf; results in the subnormal range are rounded exactly.
//   * fp16/bf16 -> float is exact (every fp16 and bf16 value is a float), subnormals included.
//   * Inf stays Inf. NaN stays NaN with its sign, is quieted, and keeps the top payload bits
//     that fit: the same bits as x86 F16C and AVX512-BF16 for every input. (CUDA's
//     __float2half / __float2bfloat16 may return a canonical NaN instead; the kernels use
//     these functions so that CPU and GPU agree on NaNs too.)
//
// The math is integer-only: no result depends on the FPU rounding mode or on flush-to-zero /
// denormals-are-zero (CUDA's -ftz, x86 MXCSR), and no float exception flag is ever raised.
// It is also branch-free (selects of integers, not ifs), so that a plain loop over these
// functions vectorises even with SSE2; an FP operation on one path would stop that, because
// GCC will not speculate a possibly-trapping FP operation to if-convert a loop.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSCPP_HD __host__ __device__
#else
#define DSCPP_HD
#endif

namespace dscpp {

DSCPP_HD inline uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DSCPP_HD inline float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits ------------------------------

DSCPP_HD inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  // Normal: rebias the exponent (15 -> 127) and widen the mantissa.
  const uint32_t normal = ((exponent + (127u - 15u)) << 23) | (mantissa << 13);
  // Subnormal: mantissa * 2^-24 is a normal float. Normalise by shifting the mantissa left
  // until bit 10 is set, by 8, 4, 2, 1 (a branch-free clz that SSE2 can vectorise); after a
  // shift of k the value is (m << k) * 2^(-24-k), so the float exponent is -14-k.
  uint32_t m = mantissa;
  uint32_t k = 0;
  k += m < 0x008u ? 8u : 0u;
  m = m < 0x008u ? m << 8 : m;
  k += m < 0x080u ? 4u : 0u;
  m = m < 0x080u ? m << 4 : m;
  k += m < 0x200u ? 2u : 0u;
  m = m < 0x200u ? m << 2 : m;
  k += m < 0x400u ? 1u : 0u;
  m = m < 0x400u ? m << 1 : m;
  const uint32_t subnormal = mantissa == 0 ? 0u : ((127u - 14u - k) << 23) | ((m & 0x3ffu) << 13);
  // Inf (mantissa 0) or NaN: keep the payload, set the quiet bit.
  const uint32_t special = 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  uint32_t magnitude = exponent == 0 ? subnormal : normal;
  magnitude = exponent == 0x1f ? special : magnitude;
  return bits_to_float(sign | magnitude);
}

DSCPP_HD inline uint16_t float_to_fp16_bits(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;           // |f|; float bit patterns order like their magnitudes
  constexpr uint32_t min_normal = 0x38800000u;  // 2^-14, the smallest normal fp16
  constexpr uint32_t overflow = 0x477ff000u;    // 65520 = 65504 + half an ulp: ties to Inf
  constexpr uint32_t inf = 0x7f800000u;
  // Normal range [2^-14, 65520): rebias the exponent (127 -> 15) and round away the low 13
  // bits, adding 0xfff plus the kept lsb so exact halves go to the even neighbour. A carry out
  // of the mantissa bumps the exponent, which is exactly the right result. Unsigned wrap-around
  // outside this range is harmless: that lane is not selected.
  const uint32_t normal = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14 the fp16 grid is uniform with step 2^-24: the result is the 24-bit
  // significand (implicit bit included) shifted right by 14 + s, s = 112 - exponent, rounded.
  // s is capped at 11, which already rounds every smaller value (zero and float subnormals
  // too) to 0. The variable shift is done in steps of 8, 4, 2, 1 that fold the dropped bits
  // into bit 0 (a sticky bit, below the rounding position), so the final rounding by 14
  // sees the same above/below/exactly-half decision as the exact value.
  const uint32_t exponent = a >> 23;
  uint32_t s = 112u - exponent;  // wraps for normal inputs; capped, then not selected
  s = s < 11u ? s : 11u;
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  m = (s & 8u) != 0 ? (m >> 8) | uint32_t((m & 0xffu) != 0) : m;
  m = (s & 4u) != 0 ? (m >> 4) | uint32_t((m & 0x0fu) != 0) : m;
  m = (s & 2u) != 0 ? (m >> 2) | uint32_t((m & 0x03u) != 0) : m;
  m = (s & 1u) != 0 ? (m >> 1) | (m & 1u) : m;
  // A value just below 2^-14 that rounds up carries into 0x400, the smallest normal: correct.
  const uint32_t subnormal = (m + 0x1fffu + ((m >> 14) & 1u)) >> 14;
  // NaN: quiet bit (0x200) plus the top 9 payload bits.
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t magnitude = a < min_normal ? subnormal : normal;
  magnitude = a >= overflow ? 0x7c00u : magnitude;
  magnitude = a > inf ? nan : magnitude;
  return uint16_t(sign | magnitude);
}

// ---- bf16: the top half of a float (1 sign, 8 exponent, 7 mantissa bits) ----------------

DSCPP_HD inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t x = uint32_t(h) << 16;
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return bits_to_float(is_nan ? x | 0x00400000u : x);  // quiet a signalling NaN
}

DSCPP_HD inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_to_bits(f);
  // Same exponent range as float, so only the mantissa is rounded: add 0x7fff plus the kept
  // lsb (ties to even). The carry handles mantissa overflow, including FLT_MAX-ish -> Inf;
  // subnormals round the same way since their grid is uniform too. Inf is unchanged.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;  // quiet, truncated payload
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  return uint16_t(is_nan ? nan : rounded);
}

// ---- value types ------------------------------------------------------------------------

// Storage types for tensors of half-precision values: exactly the 16 bits, trivially
// copyable, no arithmetic (convert to float for that). Conversions are explicit so that a
// rounding step never hides in an expression.
struct fp16_t {
  uint16_t bits;

  fp16_t() = default;
  DSCPP_HD explicit fp16_t(float f) : bits(float_to_fp16_bits(f)) {}
  DSCPP_HD explicit operator float() const { return fp16_bits_to_float(bits); }
  DSCPP_HD static fp16_t from_bits(uint16_t b) {
    fp16_t h;
    h.bits = b;
    return h;
  }
};

struct bf16_t {
  uint16_t bits;

  bf16_t() = default;
  DSCPP_HD explicit bf16_t(float f) : bits(float_to_bf16_bits(f)) {}
  DSCPP_HD explicit operator float() const { return bf16_bits_to_float(bits); }
  DSCPP_HD static bf16_t from_bits(uint16_t b) {
    bf16_t h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(fp16_t) == 2 && alignof(fp16_t) == 2, "fp16_t must be exactly 16 bits");
static_assert(sizeof(bf16_t) == 2 && alignof(bf16_t) == 2, "bf16_t must be exactly 16 bits");

}  // namespace dscpp
