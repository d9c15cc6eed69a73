// Collectives on buffers their engine cannot reach: device buffers for the engines that read
// host memory (shm, gloo, mpi, hierarchical), host buffers for nccl. The way PyTorch's gloo
// backend handles CUDA tensors: each operation is copied into one bounded area in the engine's
// memory (pinned host memory beside a GPU), run there, and copied back, in pieces when larger
// than the area. The copies are the device's own (Device::copy_to_host and friends), which run
// on its compute stream, so they start after the kernels that wrote the buffers, as the nccl
// engine's operations do.
#pragma once

#include "collectives/backend.h"
#include "device/device.h"

#include <cstddef>
#include <functional>

namespace dscpp::comm {

// Copies `bytes` from src to dst wherever each is: host memory, or memory `device` holds
// (nullptr: both are host memory). Returns when dst can be read and src reused.
void copy_between(Device* device, void* dst, const void* src, size_t bytes);

class MemoryStaging {
 public:
  // For an engine that reads `engine` memory; uses context.device_memory, host_memory and
  // staging_bytes.
  MemoryStaging(const GroupContext& context, Memory engine);

  // Whether a buffer of `op` is outside the memory the engine reads.
  bool needed(const OpDesc& op) const;
  // Runs `op` for a group of `size` ranks as operations whose buffers are in the staging area,
  // each handed to `run`. Every rank cuts an operation into the same pieces (they depend only
  // on its count, its dtype, the group size and the bound), as the engines require.
  void run(const OpDesc& op, int size, const std::function<void(const OpDesc&)>& run);

 private:
  char* area(size_t bytes);

  Device* device_;
  Memory engine_;
  Device* home_;  // where the area lives: the engine's memory
  size_t bound_;
  DeviceBuffer area_;
};

}  // namespace dscpp::comm
