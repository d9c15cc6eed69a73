// Device casts between fp32 and fp16 / bf16, using the conversion math of core/half.h so the
// GPU and the CPU (core/dtype.cpp) produce bit-identical results.
//
// The header has two parts. The launch-shape arithmetic comes first and needs no CUDA
// headers, so CPU tests can check it (define DSCPP_CUDA_CAST_SHAPE_ONLY before including to
// stop there). The launch functions need the CUDA runtime API header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/half.h"

namespace dscpp::cuda {

// Every cast kernel runs a grid-stride loop, so any grid size is correct; these only decide
// speed. 256 threads is a full-occupancy block on every architecture we build for. The cap of
// 4096 blocks (1M threads) exceeds the resident threads of the largest current GPU
// (132 SMs x 2048 on H100), so capping costs nothing while keeping the grid a 32-bit count
// for any n.
constexpr unsigned cast_threads_per_block = 256;
constexpr unsigned cast_max_blocks = 4096;

// Blocks to launch for n elements: ceil(n / threads), at least 1 for n > 0, at most the cap.
// n == 0 gives 0: the caller must not launch (a zero-sized grid is a launch error).
DSCPP_HD constexpr unsigned cast_grid_blocks(size_t n) {
  const size_t blocks = n / cast_threads_per_block + (n % cast_threads_per_block != 0 ? 1 : 0);
  return blocks < cast_max_blocks ? static_cast<unsigned>(blocks) : cast_max_blocks;
}

}  // namespace dscpp::cuda

#if !defined(DSCPP_CUDA_CAST_SHAPE_ONLY)

#include <cuda_runtime_api.h>

namespace dscpp::cuda {

// Element-wise casts of n elements from device (or managed) memory `src` to `dst` on
// `stream`; asynchronous, like any kernel launch. fp16 and bf16 are passed as their raw
// bits. Returns the launch error, if any (cudaSuccess for n == 0, which launches nothing);
// errors during execution surface at the next synchronisation, as usual. The ranges must
// not overlap.
cudaError_t launch_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, cudaStream_t stream);
cudaError_t launch_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, cudaStream_t stream);
cudaError_t launch_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, cudaStream_t stream);
cudaError_t launch_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, cudaStream_t stream);

}  // namespace dscpp::cuda

#endif  // DSCPP_CUDA_CAST_SHAPE_ONLY
