// The CUDA device: allocations through a caching allocator (device/caching_allocator.h) under the
// same accounting as every Device (current, peak and limit per category), a compute stream and
// a communication stream with events to order them, and pinned host memory for transfers and
// offload. Built only when CUDA is found (DSCPP_HAVE_CUDA); the CPU-only build never sees it.
//
// Stream discipline: kernels, copies and zeroing run on compute_stream(). A freed block is
// reused by later work on the compute stream, which is ordered after its last use there;
// memory touched on the comm stream must be fenced with compute_waits_for_comm() before
// release, as PyTorch's record_stream rule demands.
#pragma once

#include "device/device.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <string_view>

namespace dscpp {

class CudaDevice : public Device {
 public:
  virtual cudaStream_t compute_stream() const = 0;
  virtual cudaStream_t comm_stream() const = 0;
  virtual int index() const = 0;  // the CUDA device ordinal
  // Work enqueued later on the comm stream waits for everything enqueued so far on compute
  // (e.g. a gradient bucket's reduce after its backward kernels), and the reverse.
  virtual void comm_waits_for_compute() = 0;
  virtual void compute_waits_for_comm() = 0;
  // Reserved-but-free bytes held by the caching allocator, and returning them to CUDA.
  virtual size_t cached_bytes() const = 0;
  virtual void empty_cache() = 0;
};

// Device `index` (see choose_cuda_device); makes it current on the calling thread.
std::unique_ptr<CudaDevice> make_cuda_device(int index);
// The device this rank should use: LOCAL_RANK among the visible devices (device/device_select.h),
// shared with other ranks only when `comm_backend` (comm_backend_setting) stages through host
// memory. Throws with the variables and a remedy when there is none.
std::unique_ptr<CudaDevice> make_cuda_device_from_env(std::string_view comm_backend);
// Page-locked host memory (cudaHostAlloc), counted like make_host_device(): what offload and
// host↔device transfers use so that copies run at full bandwidth and asynchronously.
std::unique_ptr<Device> make_pinned_host_device();

}  // namespace dscpp
