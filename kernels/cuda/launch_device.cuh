// The launch layer under nvcc: one __global__ per launch pattern of launch.h, each turning the
// CUDA built-ins into a Thread and handing it to the shared loops. Included by launch.h only.
#pragma once

namespace dscpp::DSCPP_CUDA_NS {
namespace detail {

__device__ inline Thread this_thread() {
  return {blockIdx.x, threadIdx.x, gridDim.x, blockDim.x};
}

// The one-dimensional launches differ only in their grid and in the loop that maps a thread to
// indices (launch.h): one kernel, the loop a type. The bound (every such launch has kThreads
// threads) lets nvcc cap registers so a full block always launches.
struct EachElement {
  template <class Body>
  __device__ static void run(const Thread& t, int64_t n, Body& body) {
    for_each_element(t, n, body);
  }
};
struct EachQuad {
  template <class Body>
  __device__ static void run(const Thread& t, int64_t n, Body& body) {
    for_each_quad(t, n, body);
  }
};
struct EachIndex {
  template <class Body>
  __device__ static void run(const Thread& t, int64_t n, Body& body) {
    for_each_index(t, n, body);
  }
};

template <class Loop, class Body>
__global__ void __launch_bounds__(kThreads) grid_kernel(int64_t n, Body body) {
  Loop::run(this_thread(), n, body);
}

template <class Loop, class Body>
Status launch_grid(Shape s, int64_t n, Stream stream, Body body) {
  if (s.blocks == 0) return kOk;
  grid_kernel<Loop><<<s.blocks, s.threads, 0, stream>>>(n, body);
  return cudaGetLastError();
}

template <int Depth, class Body>
__global__ void __launch_bounds__(kChunkThreads) multi_tensor_kernel(TensorList<Depth> list, Body body) {
  for_each_chunk_element(this_thread(), list, body);
}

// Per round, every thread's partial, then launch.h's fixed tree: within each warp by shuffles
// (lane l takes lane l + 16, 8, 4, 2, 1), then the warps' totals by the first warp the same way
// (the host stub runs the same tree); then body.finish on every thread. Two block barriers per
// round where a shared-memory tree over 256 threads needs nine.
template <class Body>
__global__ void __launch_bounds__(kReduceThreads) block_reduce_kernel(Body body) {
  static_assert(Body::kRounds >= 1 && Body::kRounds <= kMaxRounds, "rounds");
  constexpr unsigned kWarps = kReduceThreads / kWarpSize;
  __shared__ double part[kWarps];
  double totals[kMaxRounds] = {};
  const Thread t = this_thread();
  const unsigned lane = t.thread % kWarpSize, warp = t.thread / kWarpSize;
  for (int r = 0; r < Body::kRounds; ++r) {
    double v = body.partial(t, r, totals);
    for (unsigned off = kWarpSize / 2; off > 0; off /= 2)
      v = Body::combine(r, v, __shfl_down_sync(0xffffffffu, v, off));
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = lane < kWarps ? part[lane] : 0.0;
      for (unsigned off = kWarps / 2; off > 0; off /= 2) v = Body::combine(r, v, __shfl_down_sync(0xffffffffu, v, off));
      if (lane == 0) part[0] = v;
    }
    __syncthreads();
    totals[r] = part[0];
    __syncthreads();  // everyone has read part[0] before the next round overwrites it
  }
  body.finish(t, totals);
}

// One warp per row: kWarpRowsPerBlock rows per block, each warp's lanes the row's threads.
template <class Body>
__global__ void __launch_bounds__(kReduceThreads) warp_rows_kernel(unsigned rows, Body body) {
  static_assert(Body::kRounds >= 1 && Body::kRounds <= kMaxRounds, "rounds");
  const unsigned row = blockIdx.x * kWarpRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp: row is the same for its lanes
  const Thread t{row, threadIdx.x % kWarpSize, rows, kWarpSize};
  double totals[kMaxRounds] = {};
  for (int r = 0; r < Body::kRounds; ++r) {
    double v = body.partial(t, r, totals);
    for (unsigned off = kWarpSize / 2; off > 0; off /= 2)
      v = Body::combine(r, v, __shfl_down_sync(0xffffffffu, v, off));
    totals[r] = __shfl_sync(0xffffffffu, v, 0);
  }
  body.finish(t, totals);
}

// Shared memory is the dynamic allocation, sized by Body::Shared (launch.h's tile contract).
template <class Body>
__global__ void __launch_bounds__(Body::kThreads) tile_kernel(Body body) {
  extern __shared__ __align__(16) unsigned char tile_shared[];
  typename Body::Shared& sh = *reinterpret_cast<typename Body::Shared*>(tile_shared);
  typename Body::Local loc;
  const Thread t = this_thread();
  body.begin(t, sh, loc);
  __syncthreads();
  const int steps = body.steps(t, sh);
  for (int s = 0; s < steps; ++s) {
#pragma unroll
    for (int p = 0; p < Body::kPhases; ++p) {
      body.phase(p, t, s, sh, loc);
      __syncthreads();
    }
  }
  body.end(t, sh, loc);
}

}  // namespace detail

template <class Body>
Status launch_elementwise(int64_t n, Stream stream, Body body) {
  return detail::launch_grid<detail::EachElement>(elementwise_shape(n), n, stream, body);
}

template <class Body>
Status launch_quads(int64_t n, Stream stream, Body body) {
  return detail::launch_grid<detail::EachQuad>(quad_shape(n), n, stream, body);
}

template <class Body>
Status launch_per_index(int64_t n, Stream stream, Body body) {
  return detail::launch_grid<detail::EachIndex>(per_index_shape(n), n, stream, body);
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

// The most shared memory one block may have on the current device (after the opt-in above
// 48 KB): 227 KB on an H100 or H200, 163 KB on an A100.
inline size_t max_tile_shared_bytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 48 * 1024;
  return size_t(bytes);
}

// `blocks` blocks of Body::kThreads sharing a Body::Shared each (launch.h). Above 48 KB of shared
// memory a kernel must opt in, once per kernel (and device: a rank uses one).
template <class Body>
Status launch_tiles(unsigned blocks, Stream stream, Body body) {
  if (blocks == 0) return kOk;
  constexpr size_t bytes = sizeof(typename Body::Shared);
  if constexpr (bytes > 48 * 1024) {
    static const Status opted = cudaFuncSetAttribute(detail::tile_kernel<Body>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (opted != cudaSuccess) return opted;
  }
  detail::tile_kernel<Body><<<blocks, Body::kThreads, bytes, stream>>>(body);
  return cudaGetLastError();
}

// One reduction per row of `cols` elements (see launch.h): a warp per row up to kWarpRowMax,
// else a block per row.
template <class Body>
Status launch_rows(unsigned rows, int64_t cols, Stream stream, Body body) {
  if (rows == 0) return kOk;
  if (cols > kWarpRowMax) return launch_block_reduce(rows, stream, body);
  detail::warp_rows_kernel<<<unsigned(ceil_div(rows, kWarpRowsPerBlock)), kReduceThreads, 0, stream>>>(rows, body);
  return cudaGetLastError();
}

}  // namespace dscpp::DSCPP_CUDA_NS
