// Where the optimizer's sub-groups live: the fp32 master weights and the optimizer state.
//
//   resident   one flat master (or the fp32 parameters themselves) and optimizer-owned state
//              on one Device: the training device (no offload) or the host device
//              (offload_optimizer device cpu: ZeRO-Offload)
//   swapped    offload_optimizer device nvme (ZeRO-Infinity): each sub-group's
//              master and state tensors sit in TensorSwapper slots under
//              <nvme_path>/dscpp-<job>-rank<R>/optimizer.swp and are brought into a pool of
//              buffer_count host buffers only while that sub-group steps or is checkpointed
//   split      offload_optimizer ratio < 1 (stage 3): the first
//              ⌊ratio · #sub-groups⌋ sub-groups in an offloaded home (resident on the host, or
//              swapped), the rest in a resident home on the training device
//
// MasterWeights walks the sub-groups through acquire/release; a home that swaps overlaps the
// I/O with the step (pipeline_read: the next sub-group is read while this one steps;
// pipeline_write: this one is written while the next one steps). Pointers from acquire() stay
// valid until the matching release().
#pragma once

#include "device/device.h"
#include "offload/aio_options.h"
#include "runtime/optim/optimizer.h"
#include "runtime/plans.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dscpp::runtime {

// How many of `sub_groups` sub-groups are offloaded — the first ones, as in DeepSpeed's
// `i < int(partial_offload * len(sub_groups))` (the same double product, truncated); 0 without
// offload.
int offloaded_sub_groups(const OptimizerOffloadPlan& options, int sub_groups);

// A sub-group's arrays while acquired: numel floats each; state in Optimizer::state_names() order.
struct SubGroupView {
  float* master = nullptr;
  std::vector<float*> state;
};

// Swap traffic and the time the step spent blocked on it (swapped homes only).
struct SwapStats {
  int64_t bytes_read = 0, bytes_written = 0;
  double wait_s = 0;  // inside acquire/release/flush waiting for reads or writes to finish
};

class StateHome {
 public:
  virtual ~StateHome() = default;
  // The device whose copies reach sub-group `sub`'s acquired arrays.
  virtual Device& memory(int sub) = 0;
  // Starts bringing sub-group `sub` in, when the home pipelines reads; else nothing.
  virtual void prefetch(int sub) { (void)sub; }
  virtual SubGroupView acquire(int sub) = 0;
  // `dirty`: the arrays changed and must reach the home's backing store — now (asynchronously
  // with pipeline_write), or with `write_now` false when the sub-group leaves the cache or at
  // flush() (checkpoint loading changes a sub-group in many small pieces).
  virtual void release(int sub, bool dirty, bool write_now = true) = 0;
  // Every write has reached the backing store (before a checkpoint or at exit).
  virtual void flush() {}
  virtual SwapStats swap_stats() const { return {}; }
  // Host bytes held outside `memory(sub)`'s accounting (the swap buffer pool).
  virtual int64_t pool_bytes() const { return 0; }
};

// master_bases[sub]: where sub-group `sub`'s master starts (a separate copy on `memory`, or the
// fp32 parameters when they are the master; unused, may be null, for the sub-groups another
// home holds). The optimizer's groups own their state, on `memory` (Optimizer::add_group_on).
std::unique_ptr<StateHome> make_resident_home(Device& memory, Optimizer& optimizer,
                                              std::vector<float*> master_bases);

// Over the optimizer's external groups 0..numels.size()-1 (sizes `numels`): creates the swap
// directory and file and writes every sub-group's initial state (the master is written by the
// caller through acquire/release once the parameters exist).
std::unique_ptr<StateHome> make_swapped_home(Optimizer& optimizer, const std::vector<int64_t>& numels,
                                             const OptimizerOffloadPlan& options, int rank);

// Sub-groups [0, offloaded_count) in `offloaded`, the rest in `resident`; both are addressed
// by the sub-group's own index (the swapped home holds groups 0..offloaded_count-1).
std::unique_ptr<StateHome> make_split_home(std::unique_ptr<StateHome> offloaded, int offloaded_count,
                                           std::unique_ptr<StateHome> resident);

// Sizes of the swapped home for a memory plan: the buffer pool (host) and the swap file (NVMe).
struct SwapFootprint {
  int64_t pool_bytes = 0;
  int64_t file_bytes = 0;
  int buffers_needed = 0;  // sub-group sets the pipelining holds at once × tensors per sub-group
};
SwapFootprint swap_footprint(const OptimizerOffloadPlan& options, int64_t max_sub_numel, int64_t sub_count,
                             int64_t state_count);

}  // namespace dscpp::runtime
