#include "device/sim_cuda_device.h"

#include "core/error.h"
#include "core/protected_memory.h"

#include <cstddef>

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

}  // namespace dscpp
