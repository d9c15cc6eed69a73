// Element-wise fp32 <-> fp16 / bf16 casts. The per-element math is core/half.h, shared with
// the CPU path; only the loop lives here.
#include "kernels/cuda/cast.h"

namespace dscpp::cuda {
namespace {

struct ToF16 {
  __device__ uint16_t operator()(float x) const { return float_to_fp16_bits(x); }
};
struct FromF16 {
  __device__ float operator()(uint16_t h) const { return fp16_bits_to_float(h); }
};
struct ToBf16 {
  __device__ uint16_t operator()(float x) const { return float_to_bf16_bits(x); }
};
struct FromBf16 {
  __device__ float operator()(uint16_t h) const { return bf16_bits_to_float(h); }
};

// Grid-stride loop: correct for any grid size, so the launch can cap the grid (see
// cast_grid_blocks) and n may exceed the number of threads. Indices are size_t because n can
// pass 2^32 elements.
template <typename Src, typename Dst, typename Op>
__global__ void cast_kernel(const Src* __restrict__ src, Dst* __restrict__ dst, size_t n, Op op) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = op(src[i]);
}

template <typename Src, typename Dst, typename Op>
cudaError_t launch(const Src* src, Dst* dst, size_t n, cudaStream_t stream, Op op) {
  if (n == 0) return cudaSuccess;  // a zero-sized grid is a launch error
  cast_kernel<<<cast_grid_blocks(n), cast_threads_per_block, 0, stream>>>(src, dst, n, op);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cast_f32_to_f16(const float* src, uint16_t* dst, size_t n, cudaStream_t stream) {
  return launch(src, dst, n, stream, ToF16{});
}

cudaError_t launch_cast_f16_to_f32(const uint16_t* src, float* dst, size_t n, cudaStream_t stream) {
  return launch(src, dst, n, stream, FromF16{});
}

cudaError_t launch_cast_f32_to_bf16(const float* src, uint16_t* dst, size_t n, cudaStream_t stream) {
  return launch(src, dst, n, stream, ToBf16{});
}

cudaError_t launch_cast_bf16_to_f32(const uint16_t* src, float* dst, size_t n, cudaStream_t stream) {
  return launch(src, dst, n, stream, FromBf16{});
}

}  // namespace dscpp::cuda
