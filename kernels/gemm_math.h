// How a GPU ops table's GEMMs treat their fp32 operands.
//   fp32  exact fp32 products (no tensor cores): the CPU table's precision, the default
//   tf32  tensor cores with inputs rounded to TF32 (10-bit mantissa), fp32 accumulation
//   bf16  tensor cores with inputs rounded to bf16 (7-bit mantissa), fp32 accumulation
//   fp16  tensor cores with inputs rounded to fp16 (10-bit mantissa, range ±65504), fp32 accumulation
// The runtime picks bf16 when the config enables bf16 and fp16 when it enables fp16 (the
// precision DeepSpeed's GEMMs run at there); DSCPP_GEMM_MATH overrides either way. Operands and
// results stay fp32 in memory: this is the rounding of the products, not a storage dtype.
#pragma once

#include "core/half.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace dscpp::kernels {

enum class GemmMath { fp32, tf32, bf16, fp16 };

inline const char* gemm_math_name(GemmMath m) {
  switch (m) {
    case GemmMath::fp32: return "fp32";
    case GemmMath::tf32: return "tf32";
    case GemmMath::bf16: return "bf16";
    case GemmMath::fp16: return "fp16";
  }
  return "?";
}
inline std::optional<GemmMath> parse_gemm_math(std::string_view s) {
  for (GemmMath m : {GemmMath::fp32, GemmMath::tf32, GemmMath::bf16, GemmMath::fp16})
    if (s == gemm_math_name(m)) return m;
  return std::nullopt;
}

// x rounded (to nearest even) to what the tensor cores read for math m: the host emulation of
// their input conversion, for the cuda-sim build and the tests.
inline float round_for_gemm(float x, GemmMath m) {
  switch (m) {
    case GemmMath::fp32: return x;
    case GemmMath::bf16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case GemmMath::fp16: return fp16_bits_to_float(float_to_fp16_bits(x));
    case GemmMath::tf32: {
      uint32_t u;
      std::memcpy(&u, &x, sizeof u);
      if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN
      u += 0xfffu + ((u >> 13) & 1u);                  // round the low 13 bits away, ties to even
      u &= ~0x1fffu;
      std::memcpy(&x, &u, sizeof u);
      return x;
    }
  }
  return x;
}

}  // namespace dscpp::kernels
