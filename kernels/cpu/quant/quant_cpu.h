// CPU loops of ZeRO++'s symmetric block int8 quantization over the shared element math of
// kernels/quant_math.h (the CUDA kernels in kernels/cuda/quant.cu use the same functions).
#pragma once

#include "core/dtype.h"

#include <cstdint>

namespace dscpp::kernels {

// Quantizes n floats in `groups` equal contiguous groups (n divisible by groups) into q[n] and
// the per-group stored scales inv_scales[groups] (1/s). Groups run on the core thread pool.
void quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales);
// x[i] = q[i]·inv_scales[group of i].
void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x);
// The same over x in its storage dtype (f32, f16 or bf16: ZeRO++ quantizes 16-bit parameters);
// dequantized values are rounded once into `type`.
void quantize_int8_groups(const void* x, DType type, int64_t n, int64_t groups, int8_t* q, float* inv_scales);
void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, void* x, DType type);

// qgZ's int4: n elements (even) in groups of `group` (even, divides n), two per byte of q.
void quantize_int4_groups(const void* x, DType type, int64_t n, int64_t group, uint8_t* q, float* inv_scales);
// acc[i] += the dequantized element i (reductions sum what arrives).
void dequantize_int4_add(const uint8_t* q, const float* inv_scales, int64_t n, int64_t group, float* acc);

}  // namespace dscpp::kernels
