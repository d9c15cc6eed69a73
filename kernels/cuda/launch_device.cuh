// The launch layer under nvcc: one __global__ per launch pattern of launch.h, each turning the
// CUDA built-ins into a Thread and handing it to the shared loops. Included by launch.h only.
#pragma once

namespace dscpp::DSCPP_CUDA_NS {
namespace detail {

__device__ inline Thread this_thread() {
  return {blockIdx.x, threadIdx.x, gridDim.x, blockDim.x};
}

template <class Body>
__global__ void elementwise_kernel(int64_t n, Body body) {
  for_each_element(this_thread(), n, body);
}

// The bound lets nvcc cap registers so a full block always launches: the attention bodies hold
// whole head-wide vectors per thread and would otherwise be free to ask for more than fits.
template <class Body>
__global__ void __launch_bounds__(kThreads) index_kernel(int64_t n, Body body) {
  for_each_index(this_thread(), n, body);
}

template <int Depth, class Body>
__global__ void __launch_bounds__(kChunkThreads) multi_tensor_kernel(TensorList<Depth> list, Body body) {
  for_each_chunk_element(this_thread(), list, body);
}

// Per round, every thread's partial, then a fixed tree over the block in shared memory (the
// host stub runs the same tree); then body.finish on every thread.
template <class Body>
__global__ void __launch_bounds__(kReduceThreads) block_reduce_kernel(Body body) {
  static_assert(Body::kRounds >= 1 && Body::kRounds <= kMaxRounds, "rounds");
  __shared__ double part[kReduceThreads];
  double totals[kMaxRounds] = {};
  const Thread t = this_thread();
  for (int r = 0; r < Body::kRounds; ++r) {
    part[t.thread] = body.partial(t, r, totals);
    __syncthreads();
    for (unsigned half = kReduceThreads / 2; half > 0; half /= 2) {
      if (t.thread < half) part[t.thread] = Body::combine(r, part[t.thread], part[t.thread + half]);
      __syncthreads();
    }
    totals[r] = part[0];
    __syncthreads();  // everyone has read part[0] before the next round overwrites it
  }
  body.finish(t, totals);
}

}  // namespace detail

template <class Body>
Status launch_elementwise(int64_t n, Stream stream, Body body) {
  const Shape s = elementwise_shape(n);
  if (s.blocks == 0) return kOk;
  detail::elementwise_kernel<<<s.blocks, s.threads, 0, stream>>>(n, body);
  return cudaGetLastError();
}

template <class Body>
Status launch_per_index(int64_t n, Stream stream, Body body) {
  const Shape s = per_index_shape(n);
  if (s.blocks == 0) return kOk;
  detail::index_kernel<<<s.blocks, s.threads, 0, stream>>>(n, body);
  return cudaGetLastError();
}

template <int Depth, class Body>
Status launch_multi_tensor(int count, void* const* const* ptrs, const int64_t* sizes, Stream stream, Body body) {
  Status status = kOk;
  plan_multi_tensor<Depth>(count, ptrs, sizes, [&](const TensorList<Depth>& list, int blocks) {
    if (status != kOk) return;
    detail::multi_tensor_kernel<Depth><<<unsigned(blocks), kChunkThreads, 0, stream>>>(list, body);
    status = cudaGetLastError();
  });
  return status;
}

// `blocks` blocks of kReduceThreads; see launch.h for the Body contract.
template <class Body>
Status launch_block_reduce(unsigned blocks, Stream stream, Body body) {
  if (blocks == 0) return kOk;
  detail::block_reduce_kernel<<<blocks, kReduceThreads, 0, stream>>>(body);
  return cudaGetLastError();
}

}  // namespace dscpp::DSCPP_CUDA_NS
