// Device casts between fp32 and fp16 / bf16, using the conversion math of core/half.h so the
// GPU and the CPU (core/dtype.cpp) produce bit-identical results. The grid comes from
// launch.h (elementwise_shape), which the CPU tests cover.
#pragma once

#include "kernels/cuda/launch.h"

#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

// Element-wise casts of n elements from device (or managed) memory `src` to `dst` on
// `stream`; asynchronous, like any kernel launch. fp16 and bf16 are passed as their raw
// bits. Returns the launch error, if any (kOk for n == 0, which launches nothing); errors
// during execution surface at the next synchronisation, as usual. The ranges must not overlap.
Status launch_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, Stream stream);
Status launch_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream);
Status launch_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, Stream stream);
Status launch_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, Stream stream);

// The two above for a 16-bit type chosen at run time: bf16 when `bf16`, else fp16.
Status launch_cast_f32_to_16(const float* src, uint16_t* dst, size_t n, bool bf16, Stream stream);
Status launch_cast_16_to_f32(const uint16_t* src, float* dst, size_t n, bool bf16, Stream stream);

}  // namespace dscpp::DSCPP_CUDA_NS
