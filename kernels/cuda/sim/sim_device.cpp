#include "kernels/cuda/sim/sim_device.h"

#include "core/error.h"
#include "core/protected_memory.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cuda/cuda_math.h"
#include "kernels/cuda/ops_table.h"
#include "kernels/ops_list.h"

#include <cstddef>
#include <cstdlib>

namespace dscpp {

SimCudaDevice::~SimCudaDevice() { drop_math(); }

void* SimCudaDevice::raw_allocate(size_t bytes) {
  void* p = protected_allocate(bytes);
  if (p != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = bytes;
  }
  return p;
}

void SimCudaDevice::raw_free(void* ptr) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) fail("cuda-sim: freeing {}, which is not an allocation of this device", ptr);
    bytes = it->second;
    blocks_.erase(it);
  }
  protected_release(ptr, bytes);
}

bool SimCudaDevice::inside(const void* p, int64_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a - it->first + static_cast<uint64_t>(bytes) <= it->second;
}

void SimCudaDevice::check_device(const void* p, int64_t bytes, const char* what) const {
  if (bytes <= 0) return;
  if (!inside(p, bytes))
    fail("cuda-sim: {} got {} bytes at {}, which is not memory of this device (on a GPU, a host pointer here "
         "faults)",
         what, bytes, p);
}

void SimCudaDevice::check_host(const void* p, const char* what) const {
  if (inside(p, 1)) fail("cuda-sim: {} expected host memory but got device memory at {}", what, p);
}

void SimCudaDevice::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  check_device(src, static_cast<int64_t>(bytes), "copy_to_host (source)");
  if (bytes) check_host(host_dst, "copy_to_host (destination)");
  ProtectedAccess open;  // a cudaMemcpy may touch device memory
  HostMemoryDevice::copy_to_host(host_dst, src, bytes);
}

void SimCudaDevice::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  check_device(dst, static_cast<int64_t>(bytes), "copy_from_host (destination)");
  if (bytes) check_host(host_src, "copy_from_host (source)");
  ProtectedAccess open;
  HostMemoryDevice::copy_from_host(dst, host_src, bytes);
}

void SimCudaDevice::copy(void* dst, const void* src, size_t bytes) {
  check_device(dst, static_cast<int64_t>(bytes), "copy (destination)");
  check_device(src, static_cast<int64_t>(bytes), "copy (source)");
  ProtectedAccess open;
  HostMemoryDevice::copy(dst, src, bytes);
}

void SimCudaDevice::zero(void* ptr, size_t bytes) {
  check_device(ptr, static_cast<int64_t>(bytes), "zero");
  ProtectedAccess open;
  HostMemoryDevice::zero(ptr, bytes);
}

std::unique_ptr<SimCudaDevice> make_sim_cuda_device() {
  auto device = std::make_unique<SimCudaDevice>();
  cuda::bind_cuda_math(*device);
  return device;
}

namespace {

// An entry of the kernel-table wrapper: opens device memory to the call, then forwards it to the
// same entry of the wrapped table (which the wrapper's `device` field points to).
template <class Entry>
struct AsKernel;
template <class... Args>
struct AsKernel<int (*)(const dscpp_ops*, Args...)> {
  template <int (*dscpp_ops::*entry)(const dscpp_ops*, Args...)>
  static int call(const dscpp_ops* self, Args... args) {
    ProtectedAccess open;
    const auto* inner = static_cast<const dscpp_ops*>(self->device);
    return (inner->*entry)(inner, args...);
  }
};

}  // namespace

dscpp_ops make_sim_cpu_ops(Device& device, std::shared_ptr<void>& context) {
  auto inner = std::make_shared<dscpp_ops>(kernels::cpu_ops(DSCPP_F32, &device));
  context = inner;
  dscpp_ops t = *inner;
  t.device = inner.get();
#define DSCPP_AS_KERNEL(name) t.name = &AsKernel<decltype(dscpp_ops::name)>::call<&dscpp_ops::name>;
  DSCPP_OPS_TABLE(DSCPP_AS_KERNEL)
#undef DSCPP_AS_KERNEL
  return t;
}

dscpp_ops make_sim_cuda_ops(std::shared_ptr<void>& context) {
  auto ops_context = std::make_shared<cuda::OpsContext>(nullptr);
  context = ops_context;
  return cuda::cuda_ops(DSCPP_F32, ops_context.get());
}

int64_t sim_cuda_ops_scratch_peak() {
  return cuda_host::scratch_bytes().peak.load();
}

void set_sim_cuda_gemm_math(const std::shared_ptr<void>& context, kernels::GemmMath math) {
  static_cast<cuda::OpsContext*>(context.get())->gemm_math = math;
}

}  // namespace dscpp
