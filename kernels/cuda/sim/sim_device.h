// cuda-sim: a Device that stands for a CUDA GPU on a machine without one, for testing the
// engine's CUDA code path. Its memory is protected host memory (core/protected_memory.h): only
// simulated kernel launches and copies can touch it, so host code that reads or writes device
// memory crashes here as it does on a GPU. It reports is_host() = false, so the engine treats it
// as a GPU: its
// buffer math is the CUDA DeviceMath built against the host launch layer (the CUDA kernels'
// own code, each launch's threads run on the CPU), and that math checks every pointer it is
// given against this device's live allocations — a host pointer handed to a kernel, which
// would fault on a GPU, is an error here too. Copies check their device side the same way.
// What it cannot show: anything about real device execution (memory model, streams, speed).
#pragma once

#include "core/device.h"
#include "dscpp/model.h"
#include "kernels/gemm_math.h"

#include <cstdint>
#include <map>
#include <memory>
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

// A cuda-sim device with its CUDA DeviceMath bound.
std::unique_ptr<SimCudaDevice> make_sim_cuda_device();
// The CUDA ops table (kernels/cuda/ops_table.h) in its host-stub build, fp32, bound to an ops
// context that `context` keeps alive (one per thread that runs layers, as on a GPU).
dscpp_ops make_sim_cuda_ops(std::shared_ptr<void>& context);
// How that table's GEMMs round their operands (`context` as make_sim_cuda_ops set it).
void set_sim_cuda_gemm_math(const std::shared_ptr<void>& context, kernels::GemmMath math);
// The most device memory that table's scratch held at once (kernels/cuda/device_scratch.h).
int64_t sim_cuda_ops_scratch_peak();
// The CPU ops table run as this device's kernels: every entry opens device memory for its call.
// What DSCPP_SIM_OPS=cpu trains with, to compare the engine's device math with the CPU device
// bit for bit (`context` keeps the wrapped table alive).
dscpp_ops make_sim_cpu_ops(Device& device, std::shared_ptr<void>& context);

}  // namespace dscpp
