// Bit-level references for the dtype tests (test_dtype.cpp: fp16/bf16 conversions against
// IEEE-754 and the hardware; test_dtype_convert.cpp: bulk convert and dtype names), written from
// the IEEE-754 definitions in double arithmetic and sharing no code with core/half.h.
#pragma once

#include "core/half.h"

#include <catch2/catch.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace dtype_test {

using dscpp::bf16_bits_to_float;
using dscpp::float_to_bf16_bits;
using dscpp::float_to_fp16_bits;
using dscpp::fp16_bits_to_float;

inline uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
inline float float_of(uint32_t u) {
  return std::bit_cast<float>(u);
}
inline std::string hex(uint32_t v, int digits) {
  return fmt::format("0x{:0{}x}", v, digits);
}

// Counts mismatches and keeps the first few descriptions for the failure report.
struct Mismatches {
  size_t count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 8) first += "\n  " + what;
  }
};

#define REQUIRE_NONE(m)                                                       \
  do {                                                                        \
    INFO(#m << ": " << (m).count << " mismatches, first ones:" << (m).first); \
    REQUIRE((m).count == 0);                                                  \
  } while (0)

// ---- IEEE-754 references ----------------------------------------------------------------

// A binary interchange format: 1 sign bit, `exp_bits` biased exponent, `man_bits` trailing
// significand (IEEE 754-2019, 3.4). fp16 is {5, 10}, bf16 is {8, 7}.
struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  uint32_t inf() const { return ((1u << exp_bits) - 1) << man_bits; }
  uint32_t quiet_bit() const { return 1u << (man_bits - 1); }
  double max_finite() const { return std::ldexp(2.0 - std::ldexp(1.0, -man_bits), bias()); }
};
inline constexpr Format fp16_format{5, 10};
inline constexpr Format bf16_format{8, 7};

inline bool ref_is_nan(uint32_t bits, Format f) {
  return (bits & ~f.sign_bit()) > f.inf();
}

// The value of a non-NaN encoding: (-1)^s 2^(E-bias) (1 + T 2^-p) for normal E, and
// (-1)^s 2^emin (0 + T 2^-p) for E == 0.
inline double ref_value(uint32_t bits, Format f) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const int biased = static_cast<int>((bits >> f.man_bits) & ((1u << f.exp_bits) - 1));
  const double t = static_cast<double>(bits & ((1u << f.man_bits) - 1));
  double magnitude;
  if (biased == (1 << f.exp_bits) - 1)
    magnitude = std::numeric_limits<double>::infinity();
  else if (biased == 0)
    magnitude = std::ldexp(t, f.emin() - f.man_bits);
  else
    magnitude = std::ldexp(std::ldexp(1.0, f.man_bits) + t, biased - f.bias() - f.man_bits);
  return negative ? -magnitude : magnitude;
}

// The float a decoder must return, from the contract: the exact value, or for NaN the same
// sign, the quiet bit, and the payload in the top mantissa bits.
inline uint32_t ref_decode(uint32_t bits, Format f) {
  if (ref_is_nan(bits, f)) {
    const uint32_t sign = (bits & f.sign_bit()) != 0 ? 0x80000000u : 0u;
    const uint32_t payload = bits & ((1u << f.man_bits) - 1);
    return sign | 0x7f800000u | 0x00400000u | (payload << (23 - f.man_bits));
  }
  return bits_of(static_cast<float>(ref_value(bits, f)));  // exact: every value fits a float
}

// Rounds x as IEEE 754 defines it for round-to-nearest-even: the exact value is rounded to the
// quantum of its binade (binades below the smallest normal share the subnormal quantum), and a
// result above the largest finite value becomes Inf. Every step is exact in double except
// nearbyint, which rounds with the default (nearest, ties to even) mode.
inline uint32_t ref_encode(double x, Format f) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0u;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | f.inf();
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, f.emin());
  const double quantum = std::ldexp(1.0, exponent - f.man_bits);
  const double rounded = std::nearbyint(a / quantum) * quantum;
  if (rounded > f.max_finite()) return sign | f.inf();
  if (rounded < std::ldexp(1.0, f.emin()))  // subnormal (or zero): E = 0, T = r / 2^(emin-p)
    return sign | static_cast<uint32_t>(rounded / std::ldexp(1.0, f.emin() - f.man_bits));
  std::frexp(rounded, &e);
  const int biased = e - 1 + f.bias();
  const uint32_t t = static_cast<uint32_t>(rounded / std::ldexp(1.0, e - 1 - f.man_bits)) - (1u << f.man_bits);
  return sign | (static_cast<uint32_t>(biased) << f.man_bits) | t;
}

// The encoding a float must get, NaN included: same sign, quiet bit, top payload bits.
inline uint32_t ref_encode_float(float x, Format f) {
  if (std::isnan(x)) {
    const uint32_t b = bits_of(x);
    const uint32_t sign = (b & 0x80000000u) != 0 ? f.sign_bit() : 0u;
    return sign | f.inf() | f.quiet_bit() | ((b & 0x7fffffu) >> (23 - f.man_bits));
  }
  return ref_encode(static_cast<double>(x), f);
}

}  // namespace dtype_test
