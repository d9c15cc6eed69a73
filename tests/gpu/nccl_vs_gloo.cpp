// The GPU suite's NCCL check: every collective of the nccl engine against gloo on the same
// inputs, in fp32 and bf16, on two ranks run as threads of one process with a CUDA device each
// (NCCL refuses two ranks on one device), then on a split sub-group with the ranks reversed.
// Without two devices, or in a build without NCCL or gloo, it exits 77 (Meson's "skipped")
// with the reason.
//
// The inputs reach each device the way the runtime's kernels write its buffers: enqueued on a
// compute stream, garbage first, and no synchronize before the collective. Only the engine's
// GroupContext::cuda_compute_stream hook orders the collective after them, so a missing hook
// (or one a sub-group did not inherit) shows up as NaNs or stale values in the results.
//
// A sum, max or min of two ranks is one IEEE operation on two operands whatever the engine's
// algorithm, so those are compared bit for bit; averages within the matrix's avg_tolerance.
#include "build_config.h"
#include "collectives/communicator.h"
#include "kernels/cuda/check.h"
#include "tests/collectives/matrix.h"
#include "tests/unit/thread_ranks.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dscpp;
using comm::Communicator;
using comm::OpKind;
using comm::ReduceOp;

namespace {

constexpr int kSkip = 77;
constexpr int kRanks = 2;

class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) { DSCPP_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1))); }
  ~DeviceBytes() { cudaFree(ptr_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// The stream stands in for CudaDevice::compute_stream(); it must outlive the communicators.
class Stream {
 public:
  Stream() { DSCPP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

struct Case {
  OpKind kind;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
  bool in_place() const { return kind == OpKind::allreduce || kind == OpKind::broadcast; }
  bool reduces() const { return kind == OpKind::allreduce || kind == OpKind::reduce_scatter; }
  size_t in_elems(size_t count, int size) const {
    return kind == OpKind::reduce_scatter || kind == OpKind::all_to_all ? count * size_t(size) : count;
  }
  size_t out_elems(size_t count, int size) const {
    return kind == OpKind::allgather || kind == OpKind::all_to_all ? count * size_t(size) : count;
  }
  std::string name() const {
    std::string s(comm::op_kind_name(kind));
    if (reduces()) s += fmt::format(" {}", comm::reduce_op_name(reduce));
    if (kind == OpKind::broadcast) s += fmt::format(" from {}", root);
    return s;
  }
};

const Case kCases[] = {
    {OpKind::allreduce, ReduceOp::sum},      {OpKind::allreduce, ReduceOp::avg},
    {OpKind::allreduce, ReduceOp::max},      {OpKind::allreduce, ReduceOp::min},
    {OpKind::reduce_scatter, ReduceOp::sum}, {OpKind::reduce_scatter, ReduceOp::avg},
    {OpKind::reduce_scatter, ReduceOp::max}, {OpKind::allgather},
    {OpKind::broadcast, ReduceOp::sum, 0},   {OpKind::broadcast, ReduceOp::sum, kRanks - 1},
    {OpKind::all_to_all},
};

void issue(Communicator& comm, const Case& c, void* in, void* out, size_t count, DType t) {
  switch (c.kind) {
    case OpKind::allreduce: return comm.allreduce(in, count, t, c.reduce);
    case OpKind::reduce_scatter: return comm.reduce_scatter(in, out, count, t, c.reduce);
    case OpKind::allgather: return comm.allgather(in, out, count, t);
    case OpKind::broadcast: return comm.broadcast(in, count, t, c.root);
    case OpKind::all_to_all: return comm.all_to_all(in, out, count, t);
    case OpKind::barrier: return comm.barrier();
  }
}

double element(const std::vector<char>& b, DType t, size_t i) {
  double d = 0;
  convert(b.data() + i * dtype_size(t), t, &d, DType::f64, 1);
  return d;
}

struct Comparison {
  Communicator& nccl;
  Communicator& gloo;
  cudaStream_t compute;
  size_t checks = 0;

  // Distinct per rank and per call, in [-4, 4] and rounded to the dtype.
  std::vector<char> inputs(DType t, size_t n, uint32_t seed) const {
    std::mt19937 rng(seed * 31 + uint32_t(gloo.rank()));
    std::uniform_real_distribution<float> d(-4.0f, 4.0f);
    std::vector<float> f(n);
    for (float& x : f) x = d(rng);
    std::vector<char> out(n * dtype_size(t) + 1);
    convert(f.data(), DType::f32, out.data(), t, n);
    return out;
  }

  // The device buffer holds NaNs until the compute stream's copy lands, so a collective that
  // starts early reads them.
  void write_on_compute_stream(void* dst, const void* staging, size_t bytes) const {
    DSCPP_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, compute));
    DSCPP_CUDA_CHECK(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyDeviceToDevice, compute));
  }

  void run(const Case& c, DType t, size_t count, uint32_t seed) {
    const int size = gloo.size();
    const size_t esz = dtype_size(t), in_bytes = c.in_elems(count, size) * esz;
    const size_t out_elems = c.out_elems(count, size), out_bytes = out_elems * esz;
    const std::vector<char> in = inputs(t, c.in_elems(count, size), seed);

    std::vector<char> host_in = in, host_out(out_bytes + 1);
    issue(gloo, c, host_in.data(), host_out.data(), count, t);
    const std::vector<char>& want = c.in_place() ? host_in : host_out;

    DeviceBytes staging(in_bytes), dev_in(in_bytes), dev_out(out_bytes);
    DSCPP_CUDA_CHECK(cudaMemcpy(staging.get(), in.data(), in_bytes, cudaMemcpyHostToDevice));
    write_on_compute_stream(dev_in.get(), staging.get(), in_bytes);
    void* result = c.in_place() ? dev_in.get() : dev_out.get();
    issue(nccl, c, dev_in.get(), result, count, t);
    std::vector<char> got(out_bytes + 1);
    DSCPP_CUDA_CHECK(cudaMemcpy(got.data(), result, out_bytes, cudaMemcpyDeviceToHost));

    const double tol = c.reduce == ReduceOp::avg && c.reduces() ? test::avg_tolerance(t) : 0;
    for (size_t i = 0; i < out_elems; ++i) {
      const double g = element(got, t, i), w = element(want, t, i);
      const bool same = tol == 0 ? std::memcmp(got.data() + i * esz, want.data() + i * esz, esz) == 0
                                 : std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w));
      if (!same)
        fail("{} ({} x {}, group '{}', rank {} of {}): element {} is {} on nccl, {} on gloo", c.name(), count,
             dtype_name(t), nccl.group_name(), nccl.rank(), size, i, g, w);
    }
    ++checks;
  }

  void all(const std::vector<size_t>& counts) {
    uint32_t seed = 0;
    for (DType t : {DType::f32, DType::bf16})
      for (size_t count : counts)
        for (const Case& c : kCases) run(c, t, count, ++seed);
  }
};

size_t compare_rank(int rank, const std::shared_ptr<comm::Store>& store) {
  DSCPP_CUDA_CHECK(cudaSetDevice(rank));
  Stream compute;
  auto nctx = test::group_context(store, "nccl", rank, kRanks, std::chrono::seconds(60));
  nctx.device = rank;
  nctx.cuda_compute_stream = compute.get();
  Communicator nccl(nctx, comm::make_nccl_backend(nctx));
  auto gctx = test::group_context(store, "gloo", rank, kRanks, std::chrono::seconds(60));
  Communicator gloo(gctx, comm::make_gloo_backend(gctx));

  Comparison world{nccl, gloo, compute.get()};
  // Around the vector widths, several NCCL chunks, and a tail.
  world.all({1, 7, 1000, 4099, (size_t(1) << 20) + 3});
  // Reversed ranks: the sub-group's slices and roots are not the world's.
  auto nsub = nccl.split(0, kRanks - 1 - rank, "nccl.reversed");
  auto gsub = gloo.split(0, kRanks - 1 - rank, "gloo.reversed");
  Comparison sub{*nsub, *gsub, compute.get()};
  sub.all({4099});
  return world.checks + sub.checks;
}

int skip(const std::string& why) {
  std::printf("SKIP: nccl_vs_gloo: %s\n", why.c_str());
  return kSkip;
}

}  // namespace

int main() {
  if (!DSCPP_HAVE_NCCL) return skip("this build has no NCCL");
  if (!DSCPP_HAVE_GLOO) return skip("this build has no gloo to compare with");
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess) return skip(fmt::format("no usable CUDA device: {}", cudaGetErrorString(rc)));
  if (devices < kRanks)
    return skip(fmt::format("{} ranks need {} CUDA devices (NCCL allows one rank per device); found {}", kRanks,
                            kRanks, devices));
  try {
    std::atomic<size_t> checks{0};
    test::run_thread_ranks(kRanks, [&](int rank, int, std::shared_ptr<comm::Store> store) {
      checks += compare_rank(rank, store);
    });
    std::printf("nccl_vs_gloo: %zu comparisons passed on %d ranks (devices 0..%d)\n", checks.load(), kRanks,
                kRanks - 1);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: nccl_vs_gloo: %s\n", e.what());
    return 1;
  }
}
