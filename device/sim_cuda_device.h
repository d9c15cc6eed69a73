// cuda-sim: a Device that stands for a CUDA GPU on a machine without one, for testing the
// engine's CUDA code path. Its memory is protected host memory (core/protected_memory.h): only
// simulated kernel launches and copies can touch it, so host code that reads or writes device
// memory crashes here as it does on a GPU. It reports is_host() = false, so the engine treats it
// as a GPU. Its buffer math, bound by make_sim_cuda_device (kernels/cuda/sim/sim_kernels.h), runs
// the CUDA kernels on the CPU and checks every pointer it is given against this device's live
// allocations — a host pointer handed to a kernel, which would fault on a GPU, is an error here
// too. Copies check their device side the same way. What it cannot show: anything about real
// device execution (memory model, streams, speed).
#pragma once

#include "device/device.h"

#include <cstdint>
#include <map>
#include <mutex>

namespace dscpp {

class SimCudaDevice final : public HostMemoryDevice {
 public:
  SimCudaDevice() = default;
  ~SimCudaDevice() override;
  std::string name() const override { return "cuda-sim"; }
  bool is_host() const override { return false; }

  void copy_to_host(void* host_dst, const void* device_src, size_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;
  bool holds(const void* ptr) const override { return inside(ptr, 1); }

  // Throws, naming `what`, unless [p, p + bytes) lies inside one live allocation of this device.
  void check_device(const void* p, int64_t bytes, const char* what) const;
  // Throws, naming `what`, if p points into an allocation of this device.
  void check_host(const void* p, const char* what) const;

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_free(void* ptr) override;

 private:
  bool inside(const void* p, int64_t bytes) const;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;  // start → bytes
};

}  // namespace dscpp
