// Mixed-precision element math shared by the CPU loops (kernels/cpu/amp) and the CUDA kernels:
// reading and writing a gradient or parameter element in its storage dtype, accumulation
// with one rounding into 16-bit storage, and the non-finite test behind overflow detection.
#pragma once

#include "core/half.h"
#include "kernels/hd.h"

#include <cstdint>

namespace dscpp::hd {

enum class Storage : uint8_t { f32, f16, bf16 };

DSCPP_HD inline float load(const void* base, int64_t i, Storage s) {
  switch (s) {
    case Storage::f16: return fp16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case Storage::bf16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Round-to-nearest-even into the storage dtype; fp16 overflow becomes ±inf, which is what
// the loss scaler's overflow check must see.
DSCPP_HD inline void store(void* base, int64_t i, Storage s, float v) {
  switch (s) {
    case Storage::f16: static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(v); break;
    case Storage::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(v); break;
    default: static_cast<float*>(base)[i] = v;
  }
}

// Gradient accumulation in the storage dtype, as DeepSpeed does for fp16/bf16 grads: the sum is
// formed in fp32 and rounded once.
DSCPP_HD inline void accumulate(void* base, int64_t i, Storage s, float g) { store(base, i, s, load(base, i, s) + g); }

// NaN or ±inf (exponent all ones), by bits so fast-math cannot fold it away.
DSCPP_HD inline bool nonfinite(float v) { return (float_to_bits(v) & 0x7f800000u) == 0x7f800000u; }

}  // namespace dscpp::hd
