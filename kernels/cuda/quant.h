// ZeRO++ symmetric block quantization on the device: the twins of kernels/cpu/quant/quant_cpu.h
// over the same element math (kernels/quant_math.h), with the same byte layout, so a buffer
// quantized on one side dequantizes to the same bits on the other. A shape the CPU rejects
// returns cudaErrorInvalidValue here (nothing is launched). Device pointers; asynchronous on
// `stream`.
#pragma once

#include "kernels/amp_math.h"
#include "kernels/cuda/launch.h"

#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

using hd::Storage;

// qwZ's int8: n split into `groups` equal groups (hd::qwz_group_count gives DeepSpeed's
// count). One block per group: its absmax, then q and the stored scale 1/s.
Status quantize_int8_groups(const float* x, int64_t n, int64_t groups, int8_t* q, float* inv_scales, Stream stream);
Status dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, float* x,
                              Stream stream);

// qgZ's int4: n elements in groups of `group` (even, divides n), two per byte of q (the even
// element in the low nibble), x in its storage dtype. One block per group.
Status quantize_int4_groups(const void* x, Storage type, int64_t n, int64_t group, uint8_t* q, float* inv_scales,
                            Stream stream);
// acc[i] += the dequantized element i: the receiving side of qgZ's all-to-all sums what each
// peer sent, one call per peer, in the order the CPU does.
Status dequantize_int4_add(const uint8_t* q, const float* inv_scales, int64_t n, int64_t group, float* acc,
                           Stream stream);

}  // namespace dscpp::DSCPP_CUDA_NS
