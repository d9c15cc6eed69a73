// Launch arithmetic of the CUDA kernels, in plain C++ that nvcc and g++ both compile: grid and
// block sizes, the per-thread element loops (vector width, tails, 32- or 64-bit indices), and
// the multi-tensor chunk lists of the fused optimizers (DeepSpeed's multi_tensor_apply).
//
// Kernel bodies are functors whose operator() takes an element index (or a Thread for the
// block reductions); they never read blockIdx/threadIdx themselves. The loops below map a
// Thread to indices, and the launch layer maps real CUDA threads to Threads: launch_device.cuh
// under nvcc, launch_host_stub.h (which runs every thread on the host and records the launch)
// when a .cu source is compiled as C++ for the CPU unit tests. So the tests run exactly the
// index arithmetic the GPU runs.
#pragma once

#include "kernels/cuda/cuda_ns.h"
#include "kernels/hd.h"

#include <climits>
#include <cstddef>
#include <cstdint>

#if defined(DSCPP_CUDA_HOST_STUB)
namespace dscpp::DSCPP_CUDA_NS {
struct StubStream;
using Stream = StubStream*;  // host stub: no CUDA headers, the tests pass nullptr
using Status = int;
constexpr Status kOk = 0;
}  // namespace dscpp::DSCPP_CUDA_NS
#else
#include <cuda_runtime_api.h>
namespace dscpp::DSCPP_CUDA_NS {
using Stream = cudaStream_t;
using Status = cudaError_t;
constexpr Status kOk = cudaSuccess;
}  // namespace dscpp::DSCPP_CUDA_NS
#endif

namespace dscpp::DSCPP_CUDA_NS {

// ---- one-dimensional launches ---------------------------------------------------------------

// 256 threads is a full-occupancy block on every architecture we build for; each thread keeps
// kVec elements in flight per step (for_each_element). The cap of 4096 blocks (4M elements
// per grid step) exceeds what the largest current GPU keeps resident (132 SMs × 2048 threads),
// so capping costs nothing and keeps the grid a 32-bit count for any n.
constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;
constexpr int kVec = 4;

// A thread's place in its launch (what blockIdx.x, threadIdx.x, gridDim.x, blockDim.x say).
struct Thread {
  unsigned block, thread, blocks, threads;
  DSCPP_HD int64_t global() const { return int64_t(block) * threads + thread; }
  DSCPP_HD int64_t stride() const { return int64_t(blocks) * threads; }
};

struct Shape {
  unsigned blocks = 0, threads = 0;
};

DSCPP_HD constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// a / b and a % b (a ≥ 0, b > 0) in 32-bit arithmetic when both fit: a GPU divides 32-bit
// integers in a handful of instructions and 64-bit ones in a long software sequence, and the
// kernels that split a flat index into row and column do it per element.
struct QuotRem {
  int64_t quot, rem;
};
DSCPP_HD inline QuotRem divmod(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) {
    const uint32_t q = uint32_t(a) / uint32_t(b);
    return {int64_t(q), int64_t(uint32_t(a) - q * uint32_t(b))};
  }
  return {a / b, a % b};
}

// The grid for n elements at kVec per thread: enough blocks for one step over all of them,
// capped; 0 blocks for n ≤ 0 (the caller must not launch: a zero-sized grid is an error).
DSCPP_HD constexpr Shape elementwise_shape(int64_t n) {
  if (n <= 0) return {0, kThreads};
  const int64_t blocks = ceil_div(ceil_div(n, kVec), kThreads);
  return {blocks < kMaxBlocks ? unsigned(blocks) : kMaxBlocks, kThreads};
}

// 32-bit indices are cheaper on the GPU; they are safe while no index a thread forms, the
// last one plus one grid step included, passes INT32_MAX. DeepSpeed's fused Adam switches
// at 2^31 elements for the same reason.
DSCPP_HD constexpr bool needs_64bit_index(int64_t n, Shape s) {
  return n + int64_t(s.blocks) * s.threads * kVec > int64_t(INT32_MAX);
}

namespace detail {
template <class Index, class Body>
DSCPP_HD void for_each_element(const Thread& t, Index n, Body& body) {
  // Grid-strided with kVec indices in flight: thread g takes g, g + S, g + 2S, … (S threads in
  // the grid), kVec at a time, so each load or store instruction of a warp covers 32
  // consecutive elements. (kVec consecutive elements per thread, the earlier mapping, made
  // every warp instruction touch every fourth element of four lines.)
  const Index stride = Index(t.stride());
  Index i = Index(t.global());
  for (; i + (kVec - 1) * stride < n; i += kVec * stride) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < kVec; ++j) body(int64_t(i + j * stride));
  }
  for (; i < n; i += stride) body(int64_t(i));
}
}  // namespace detail

// Calls body(i) for every i in [0, n) that thread t owns; over all threads of the grid, each
// index exactly once.
template <class Body>
DSCPP_HD void for_each_element(const Thread& t, int64_t n, Body& body) {
  if (needs_64bit_index(n, {t.blocks, t.threads}))
    detail::for_each_element<int64_t>(t, n, body);
  else
    detail::for_each_element<int32_t>(t, int32_t(n), body);
}

// ---- four elements per access -----------------------------------------------------------------

// For streaming bodies whose pointers are all 16-byte aligned (the caller checks): thread g takes
// quads (4 consecutive elements) g, g + S, …, four quads per call of body.quads4(q, S), which
// loads all four before it stores any, then single quads (body.quad(q)), then the n mod 4 tail
// elements one by one (body(i)). A scalar loop stores between its loads, so the compiler, which
// cannot rule out that the store feeds the next load, keeps one load in flight per thread.
template <class Body>
DSCPP_HD void for_each_quad(const Thread& t, int64_t n, Body& body) {
  const int64_t quads = n / 4, stride = t.stride();
  int64_t q = t.global();
  for (; q + 3 * stride < quads; q += 4 * stride) body.quads4(q, stride);
  for (; q < quads; q += stride) body.quad(q);
  for (int64_t i = 4 * quads + t.global(); i < n; i += stride) body(i);
}
// The grid for n elements as quads, four per thread per step.
DSCPP_HD constexpr Shape quad_shape(int64_t n) {
  return elementwise_shape(n / 4 > 0 ? n / 4 : (n > 0 ? 1 : 0));
}
// Four elements of T as one aligned access (LDG.128 for fp32, LDG.64 for 16-bit types).
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// ---- one index per thread ---------------------------------------------------------------------

// For kernels whose index is a column, a row or a query that the thread then loops over:
// kVec consecutive indices per thread would run those loops one after another on one thread
// and give neighbouring threads addresses kVec apart, where a warp should read one row's
// consecutive columns together.
DSCPP_HD constexpr Shape per_index_shape(int64_t n) {
  if (n <= 0) return {0, kThreads};
  const int64_t blocks = ceil_div(n, kThreads);
  return {blocks < kMaxBlocks ? unsigned(blocks) : kMaxBlocks, kThreads};
}
// Calls body(i) for i = t.global(), + stride, … below n: over the grid, each index once.
template <class Body>
DSCPP_HD void for_each_index(const Thread& t, int64_t n, Body& body) {
  for (int64_t i = t.global(); i < n; i += t.stride()) body(i);
}

// ---- block reductions -------------------------------------------------------------------------

// Reductions run one block per item (a row, a quantization group, a slice of a buffer) in
// Body::kRounds rounds: in round r every thread returns body.partial(t, r, totals) (its share,
// striding over the item; totals[0..r) are the earlier rounds' results), the partials are
// combined with Body::combine(r, a, b) in a fixed tree (reduce_tree below, which the device and
// the host stub both run), and the result becomes totals[r] for every thread. Then every thread calls
// body.finish(t, totals). So a layer-norm row is one launch: round 0 the sum, round 1 the
// squared deviations from the mean, finish writes the row. Results do not depend on
// scheduling. kReduceThreads must be a power of two.
constexpr unsigned kReduceThreads = 256;
constexpr unsigned kWarpSize = 32;
constexpr int kMaxRounds = 4;
static_assert(kReduceThreads % kWarpSize == 0 && kReduceThreads / kWarpSize <= kWarpSize, "one warp sums the warps");

// The tree over a block's kReduceThreads partials (part is overwritten): in each warp, lane l
// combines with lane l + 16, 8, 4, 2, 1; then warp w's total with warp w + 4, 2, 1. The device
// runs it with shuffles (launch_device.cuh), the host stub with this loop.
template <class Combine>
double warp_tree(double* part, Combine combine) {  // the first stage alone: one warp's 32 partials
  for (unsigned off = kWarpSize / 2; off > 0; off /= 2)
    for (unsigned l = 0; l < off; ++l) part[l] = combine(part[l], part[l + off]);
  return part[0];
}
template <class Combine>
double reduce_tree(double* part, Combine combine) {
  for (unsigned w = 0; w < kReduceThreads; w += kWarpSize) warp_tree(part + w, combine);
  for (unsigned off = kReduceThreads / kWarpSize / 2; off > 0; off /= 2)
    for (unsigned w = 0; w < off; ++w) part[w * kWarpSize] = combine(part[w * kWarpSize], part[(w + off) * kWarpSize]);
  return part[0];
}
// Rows up to kWarpRowMax wide reduce with one warp per row instead of one block (launch_rows):
// the same Body, seen as blocks of kWarpSize threads (t.block the row, t.threads 32), summed by
// the warp tree alone. A 768-wide layer-norm row gives each of 256 threads 3 elements and two
// block barriers per round; a warp gives each lane 24 and needs no barrier.
constexpr int64_t kWarpRowMax = 4096;
constexpr unsigned kWarpRowsPerBlock = kReduceThreads / kWarpSize;

// Blocks of a "many partial sums" reduction (global norm, overflow flag): enough to fill any
// current GPU, few enough that the host sums the partials in microseconds.
constexpr unsigned kReduceBlocks = 1024;

// The elements [begin, end) of `n` that block b of `blocks` covers (equal slices, the last
// one shorter): the slice a block of a partial-sum reduction reads.
struct Range {
  int64_t begin, end;
};
DSCPP_HD constexpr Range block_slice(int64_t n, unsigned b, unsigned blocks) {
  const int64_t per = ceil_div(n, blocks);
  const int64_t begin = int64_t(b) * per < n ? int64_t(b) * per : n;
  const int64_t end = begin + per < n ? begin + per : n;
  return {begin, end};
}
// Blocks for a partial-sum reduction over n elements: one per kReduceThreads·kVec elements,
// at most kReduceBlocks, at least 1 (so the partials are always written, 0 for n = 0).
DSCPP_HD constexpr unsigned reduce_blocks(int64_t n) {
  const int64_t b = ceil_div(n, int64_t(kReduceThreads) * kVec);
  return b < 1 ? 1u : (b > kMaxBlocks / 4 ? kReduceBlocks : unsigned(b));
}

// ---- tiles: blocks that work through shared memory -----------------------------------------------

// For kernels whose threads share tiles of their operands (the tiled attention of ops_flash.cu):
// a block's work is a sequence of phases separated by block barriers, and every thread of the
// block runs every phase. The launch runs, per block,
//   begin; barrier; n = steps; then for step 0 … n−1 the phases 0 … kPhases−1, each followed by
//   a barrier; then end.
// Body::Shared is the block's shared memory (any size the GPU allows: launch_device.cuh opts in
// above 48 KB), Body::Local one thread's state across phases (its registers on the GPU);
// neither is initialised by the launch. steps() must give every thread of the block the same
// count (it reads what begin left in Shared). The host stub runs each phase for every thread of
// the block before the next phase, which is what the barriers promise on the GPU, with Shared
// and Local filled with NaN bytes first, so a read of anything not written fails the tests. It
// cannot show a race inside one phase (two threads writing, or one reading what another
// writes, between the same two barriers): the bodies must not have one.
// max_tile_shared_bytes() is the most a block may have on the current device: a caller with
// another way to do the work checks sizeof(Body::Shared) against it first.
//   struct Body {
//     static constexpr unsigned kThreads; static constexpr int kPhases;
//     struct Shared; struct Local;
//     void begin(const Thread&, Shared&, Local&) const;
//     int steps(const Thread&, const Shared&) const;
//     void phase(int p, const Thread&, int step, Shared&, Local&) const;
//     void end(const Thread&, const Shared&, Local&) const;
//   };

// ---- multi-tensor apply (fused optimizers) ------------------------------------------------------

// One block per chunk of 65,536 elements of one tensor, 512 threads × 4 elements per pass,
// as DeepSpeed's multi_tensor_apply does.
constexpr int64_t kChunk = 65536;
constexpr unsigned kChunkThreads = 512;
constexpr int kChunkIlp = 4;

// Tensors per launch by list depth (how many arrays per tensor: g, w, m, v …) and blocks per
// launch: apex/DeepSpeed's values, which keep the kernel argument below the 4 KB that every
// CUDA version accepts.
DSCPP_HD constexpr int max_tensors_for_depth(int depth) {
  return depth == 1 ? 110 : depth == 2 ? 64 : depth == 3 ? 48 : depth == 4 ? 36 : 30;
}
constexpr int kMaxChunkBlocks = 320;

// The kernel argument of one multi-tensor launch: per tensor slot, its Depth base pointers,
// its size and its index in the caller's list; per block, the slot and the chunk it updates.
template <int Depth>
struct TensorList {
  static constexpr int kMaxTensors = max_tensors_for_depth(Depth);
  void* ptr[Depth][kMaxTensors];
  int64_t size[kMaxTensors];
  int32_t tensor[kMaxTensors];
  uint8_t block_slot[kMaxChunkBlocks];
  int32_t block_chunk[kMaxChunkBlocks];
};
static_assert(sizeof(TensorList<1>) <= 4096 && sizeof(TensorList<4>) <= 4096 && sizeof(TensorList<5>) <= 4096,
              "a multi-tensor kernel argument must fit CUDA's 4 KB parameter limit");

// Splits `count` tensors (ptrs[d][k] is array d of tensor k, sizes[k] its elements) into
// launches and calls launch(list, blocks) for each: at most kMaxTensors tensors and
// kMaxChunkBlocks chunks per launch. A tensor whose chunks do not all fit continues in the
// next launch (it becomes slot 0 there). Empty tensors are skipped; no launch has 0 blocks.
template <int Depth, class Launch>
void plan_multi_tensor(int count, void* const* const* ptrs, const int64_t* sizes, Launch&& launch) {
  TensorList<Depth> list{};
  int slot = 0, blocks = 0;
  for (int k = 0; k < count; ++k) {
    if (sizes[k] <= 0) continue;
    for (int d = 0; d < Depth; ++d) list.ptr[d][slot] = ptrs[d][k];
    list.size[slot] = sizes[k];
    list.tensor[slot] = k;
    const int64_t chunks = ceil_div(sizes[k], kChunk);
    for (int64_t c = 0; c < chunks; ++c) {
      list.block_slot[blocks] = uint8_t(slot);
      list.block_chunk[blocks] = int32_t(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      const bool slots_full = slot + 1 == TensorList<Depth>::kMaxTensors && last_chunk;
      if (blocks == kMaxChunkBlocks || slots_full) {
        launch(list, blocks);
        blocks = 0;
        if (!last_chunk) {  // the tensor goes on in the next launch, as slot 0
          for (int d = 0; d < Depth; ++d) list.ptr[d][0] = list.ptr[d][slot];
          list.size[0] = list.size[slot];
          list.tensor[0] = list.tensor[slot];
          slot = 0;
        } else {
          slot = -1;  // next tensor starts at slot 0
        }
      }
    }
    ++slot;
  }
  if (blocks > 0) launch(list, blocks);
}

// Calls body(list, slot, i) for every element i of the chunk that thread t's block owns.
// Thread j takes elements j, j + threads, … (kChunkIlp per pass), so a warp reads
// consecutive addresses.
template <int Depth, class Body>
DSCPP_HD void for_each_chunk_element(const Thread& t, const TensorList<Depth>& list, Body& body) {
  const int slot = list.block_slot[t.block];
  const int64_t begin = int64_t(list.block_chunk[t.block]) * kChunk;
  const int64_t rest = list.size[slot] - begin;
  const int64_t len = rest < kChunk ? rest : kChunk;
  for (int64_t base = 0; base < len; base += int64_t(t.threads) * kChunkIlp) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < kChunkIlp; ++j) {
      const int64_t i = base + t.thread + int64_t(j) * t.threads;
      if (i < len) body(list, slot, begin + i);
    }
  }
}

}  // namespace dscpp::DSCPP_CUDA_NS

// The launch layer proper: real kernels under nvcc, the recording host stub for the CPU tests.
#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/launch_host_stub.h"
#elif defined(__CUDACC__)
#include "kernels/cuda/launch_device.cuh"
#endif
