// The launch layer for the CPU unit tests: a .cu source compiled as C++ with
// DSCPP_CUDA_HOST_STUB gets these instead of launch_device.cuh. Each launch is recorded (what
// a test checks: grid, block, tensors per launch) and then every thread of the grid runs on
// the calling thread, one after another, through the same loops as on the GPU. Reductions
// combine the per-thread partials with the device's tree. Only for small sizes: a 4096-block
// grid is a million host calls. A launch may touch cuda-sim's device memory, which host code
// outside a launch or copy cannot (core/protected_memory.h).
#pragma once

#include "core/protected_memory.h"

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dscpp::DSCPP_CUDA_NS {

struct StubLaunch {
  std::string kind;  // "elementwise", "per_index", "multi_tensor", "block_reduce", "warp_rows", "quads", "tiles"
  unsigned blocks, threads;
  int tensors = 0;  // multi-tensor launches: tensor slots in use
};

// The launches this thread made since the last clear, in order. Per thread, because the
// cuda-sim device launches from the engine's and the communicator's threads; a long run
// records only its latest launches (tests clear before the few they check).
inline std::vector<StubLaunch>& stub_launches() {
  thread_local std::vector<StubLaunch> log;
  return log;
}
inline void record_launch(StubLaunch launch) {
  std::vector<StubLaunch>& log = stub_launches();
  if (log.size() >= 1024) log.clear();
  log.push_back(std::move(launch));
}

// Runs loop(thread) for every thread of a one-dimensional grid of shape s, recorded as `kind`.
template <class Loop>
Status run_grid(const char* kind, Shape s, Loop loop) {
  if (s.blocks == 0) return kOk;
  record_launch({kind, s.blocks, s.threads});
  ProtectedAccess on_device;
  for (unsigned b = 0; b < s.blocks; ++b)
    for (unsigned t = 0; t < s.threads; ++t) loop(Thread{b, t, s.blocks, s.threads});
  return kOk;
}

template <class Body>
Status launch_elementwise(int64_t n, Stream, Body body) {
  return run_grid("elementwise", elementwise_shape(n), [&](const Thread& t) { for_each_element(t, n, body); });
}

template <class Body>
Status launch_quads(int64_t n, Stream, Body body) {
  return run_grid("quads", quad_shape(n), [&](const Thread& t) { for_each_quad(t, n, body); });
}

template <class Body>
Status launch_per_index(int64_t n, Stream, Body body) {
  return run_grid("per_index", per_index_shape(n), [&](const Thread& t) { for_each_index(t, n, body); });
}

template <int Depth, class Body>
Status launch_multi_tensor(int count, void* const* const* ptrs, const int64_t* sizes, Stream, Body body) {
  ProtectedAccess on_device;
  plan_multi_tensor<Depth>(count, ptrs, sizes, [&](const TensorList<Depth>& list, int blocks) {
    int slots = 0;
    for (int b = 0; b < blocks; ++b) slots = list.block_slot[b] + 1 > slots ? list.block_slot[b] + 1 : slots;
    record_launch({"multi_tensor", unsigned(blocks), kChunkThreads, slots});
    for (unsigned b = 0; b < unsigned(blocks); ++b)
      for (unsigned t = 0; t < kChunkThreads; ++t)
        for_each_chunk_element(Thread{b, t, unsigned(blocks), kChunkThreads}, list, body);
  });
  return kOk;
}

template <class Body>
Status launch_block_reduce(unsigned blocks, Stream, Body body) {
  if (blocks == 0) return kOk;
  record_launch({"block_reduce", blocks, kReduceThreads});
  ProtectedAccess on_device;
  double part[kReduceThreads];
  for (unsigned b = 0; b < blocks; ++b) {
    double totals[kMaxRounds] = {};
    for (int r = 0; r < Body::kRounds; ++r) {
      for (unsigned t = 0; t < kReduceThreads; ++t)
        part[t] = body.partial(Thread{b, t, blocks, kReduceThreads}, r, totals);
      totals[r] = reduce_tree(part, [r](double a, double b) { return Body::combine(r, a, b); });
    }
    for (unsigned t = 0; t < kReduceThreads; ++t) body.finish(Thread{b, t, blocks, kReduceThreads}, totals);
  }
  return kOk;
}

template <class Body>
Status launch_rows(unsigned rows, int64_t cols, Stream stream, Body body) {
  if (rows == 0) return kOk;
  if (cols > kWarpRowMax) return launch_block_reduce(rows, stream, body);
  record_launch({"warp_rows", unsigned(ceil_div(rows, kWarpRowsPerBlock)), kReduceThreads});
  ProtectedAccess on_device;
  double part[kWarpSize];
  for (unsigned b = 0; b < rows; ++b) {
    double totals[kMaxRounds] = {};
    for (int r = 0; r < Body::kRounds; ++r) {
      for (unsigned t = 0; t < kWarpSize; ++t) part[t] = body.partial(Thread{b, t, rows, kWarpSize}, r, totals);
      totals[r] = warp_tree(part, [r](double a, double c) { return Body::combine(r, a, c); });
    }
    for (unsigned t = 0; t < kWarpSize; ++t) body.finish(Thread{b, t, rows, kWarpSize}, totals);
  }
  return kOk;
}

// The host has no shared-memory limit; the tests hold the kernels to what a GPU allows.
inline size_t max_tile_shared_bytes() { return size_t(1) << 30; }

// Each phase runs on every thread of the block before the next one starts (launch.h).
template <class Body>
Status launch_tiles(unsigned blocks, Stream, Body body) {
  if (blocks == 0) return kOk;
  record_launch({"tiles", blocks, Body::kThreads});
  ProtectedAccess on_device;
  using Shared = typename Body::Shared;
  using Local = typename Body::Local;
  static_assert(std::is_trivially_copyable_v<Shared> && std::is_trivially_copyable_v<Local>, "plain data");
  std::unique_ptr<Shared> sh(new Shared);
  std::vector<Local> loc(Body::kThreads);
  auto thread = [&](unsigned b, unsigned t) { return Thread{b, t, blocks, Body::kThreads}; };
  for (unsigned b = 0; b < blocks; ++b) {
    std::memset(static_cast<void*>(sh.get()), 0xff, sizeof(Shared));  // NaN floats, -1 integers
    std::memset(static_cast<void*>(loc.data()), 0xff, sizeof(Local) * loc.size());
    for (unsigned t = 0; t < Body::kThreads; ++t) body.begin(thread(b, t), *sh, loc[t]);
    const int steps = body.steps(thread(b, 0), *sh);
    for (unsigned t = 1; t < Body::kThreads; ++t)
      if (body.steps(thread(b, t), *sh) != steps) return 1;  // the contract: one count per block
    for (int s = 0; s < steps; ++s)
      for (int p = 0; p < Body::kPhases; ++p)
        for (unsigned t = 0; t < Body::kThreads; ++t) body.phase(p, thread(b, t), s, *sh, loc[t]);
    for (unsigned t = 0; t < Body::kThreads; ++t) body.end(thread(b, t), *sh, loc[t]);
  }
  return kOk;
}

}  // namespace dscpp::DSCPP_CUDA_NS
