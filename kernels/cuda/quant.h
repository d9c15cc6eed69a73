// ZeRO++ symmetric block int8 quantization on the device: the twins of
// kernels/cpu/quant/quant_cpu.h over the same element math (kernels/quant_math.h). n must
// split into `groups` equal groups (hd::qwz_group_count gives DeepSpeed's count); the launch
// returns cudaErrorInvalidValue otherwise. Device pointers; asynchronous on `stream`.
#pragma once

#include "kernels/cuda/launch.h"

#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

// One block per group: its absmax, then q and the stored scale 1/s.
Status quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales, Stream stream);
Status dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x,
                              Stream stream);

}  // namespace dscpp::DSCPP_CUDA_NS
