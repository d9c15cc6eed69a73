// CPU loops of ZeRO++'s symmetric block int8 quantization over the shared element math of
// kernels/quant_math.h (the CUDA kernels in kernels/cuda/quant.cu use the same functions).
#pragma once

#include <cstdint>

namespace dscpp::kernels {

// Quantizes n floats in `groups` equal contiguous groups (n divisible by groups) into q[n] and
// the per-group stored scales inv_scales[groups] (1/s). Groups run on the core thread pool.
void quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales);
// x[i] = q[i]·inv_scales[group of i].
void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x);

}  // namespace dscpp::kernels
