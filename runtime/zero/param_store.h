// Where the model's parameters live, per ZeRO stage, in the compute storage dtype.
//
//   stage 0–2  every rank holds the whole flat array (layout.total elements); after the
//              optimizer step each rank's updated slice is allgathered in place, group by group
//              (stage 0: parts = 1, nothing to gather).
//   stage 3    every rank holds only its slices (layout.part_total elements, zero.Init-style: no
//              rank ever materialises the whole model). A layer's group is gathered into a
//              temporary buffer before the layer runs and released after it, except
//              persistent groups (small ones, stage3_param_persistence_threshold /
//              model_persistence_threshold), which stay gathered. Gathers are asynchronous:
//              when a group is needed the next groups in execution order are prefetched,
//              up to stage3_prefetch_bucket_size elements in flight and
//              stage3_max_live_parameters gathered in all. At the turn from forward to backward
//              a group whose next use lies within stage3_max_reuse_distance elements of
//              parameter traffic is kept instead of released and gathered again, as long as
//              the kept groups stay within stage3_max_live_parameters.
//
// Where the owned slices live between uses (device, host memory, NVMe: offload_param) is
// ParamHome's business; a stage-3 gather of an offloaded slice first copies it to its own place
// in the gathered device buffer and allgathers in place from there, as DeepSpeed copies a CPU
// ds_tensor into its all-gather buffer. With NVMe, the slices of the groups after the
// gather window are swapped in ahead, as far as free swap buffers allow.
//
// ZeRO++ hpZ (zero_hpz_partition_size = h): when a group's forward use ends and it will be
// gathered again in backward, each rank keeps the slice of it that its rank within its group of h
// consecutive ranks owns (group.numel / h elements, category params), and the backward gather
// runs over that group's own communicator, so it never leaves a node when a node holds h ranks.
// The copies are dropped after the optimizer step (publish). They hold the forward's gathered
// values exactly and are gathered in the storage dtype, also under qwZ, so hpZ on or off
// trains the same weights bit for bit.
//
// The execution order is static (layers 0..L−1 forward, L−1..0 backward), so unlike
// DeepSpeed's trace-and-replay coordinator the prefetch order is known from the first step.
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/offload/param_home.h"
#include "runtime/plans.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dscpp::runtime {

// The ZeRO++ switches on (qwZ, hpZ: ParamStore; qgZ: GradReducer) as one log line, or "" when
// none is; `nodes` says whether qgZ applies.
std::string describe_zeropp(const ZeroPlan& zero, const Stage3Plan& s3, int world_size, int nodes);

class ParamStore {
 public:
  // `host`: where offloaded slices are counted (required when offload.device is not none).
  ParamStore(const FlatLayout& layout, comm::Communicator& comm, Device& device, DType dtype, bool partitioned,
             const Stage3Plan& stage3 = {}, Device* host = nullptr, const ParamOffloadPlan& offload = {});
  ~ParamStore();

  // Stage 3: which groups stay gathered (DeepSpeed's persistence walk with the group as the
  // unit), and a bound on the elements gathered at any moment under this policy.
  static std::vector<bool> persistent_groups(const FlatLayout& layout, const Stage3Plan& stage3);
  static int64_t gathered_bound(const FlatLayout& layout, const Stage3Plan& stage3);
  // What makes that bound, in the settings' names, with the setting that lowers it when the
  // whole model can be gathered at once (the memory plan's line).
  static std::string gathered_reason(const FlatLayout& layout, const Stage3Plan& stage3, size_t elem);

  DType dtype() const { return dtype_; }
  bool partitioned() const { return partitioned_; }
  const FlatLayout& layout() const { return layout_; }
  int layer_count() const { return static_cast<int>(layout_.layer_range.size()); }

  // This rank's slice of group g (g.part elements; stage 0: the whole group) when it lives on the
  // device; nullptr when offloaded (then only through home()).
  void* owned(int group) const { return home_->on_device(group); }
  // The whole array (stage 0–2 only).
  void* full() const { return home_->full(); }
  ParamHome& home() { return *home_; }
  const ParamHome& home() const { return *home_; }
  // Collective: group g gathered whole into device memory `dst` (g.numel elements), now.
  void gather_to(int group, void* dst);

  // A pass over the layers begins: forward (with a backward to follow when `training`) or backward.
  void begin_pass(bool backward, bool training);
  // The layer's parameters at element layout.layer_range[layer].first; gathers at stage 3.
  // `prefetch` false: only this layer's group — an activation-checkpointing recompute runs
  // upwards inside backward, where the backward-order window already holds what comes next.
  const void* layer_params(int layer, bool backward, bool prefetch = true);
  // After the layer ran (stage 3: release or keep).
  void layer_done(int layer, bool backward);
  // Issues exactly the collectives of a forward pass over layers [first, end) (end −1: all) without
  // computing (stage 3), for a rank that has no batch of its own while the others run one
  // (evaluation tails, rank 0's report, generation's encoder passes and decode steps).
  void follow_forward(int first = 0, int end = -1);
  // Releases every non-persistent gathered group (end of a pass that was cut short, or of eval).
  void release_all();
  // After the owned slices changed (optimizer step, checkpoint load): stage 1/2 allgather every
  // group in place; stage 3 re-gathers the persistent groups.
  void publish();
  // Waits for every gather in flight (their sources are the owned slices): before the owned
  // slices are overwritten outside the step loop (checkpoint load, --init_from).
  void settle();

  int64_t gathered_elements() const { return live_elements_; }
  int64_t gathers() const { return gathers_; }  // allgathers issued at stage 3 (for tests)
  // hpZ's communicator (nullptr when hpZ is off), for its traffic figures.
  const comm::Communicator* hpz_group() const { return hpz_.get(); }
  // Elements of the hpZ secondary copies a training step holds at most (0: hpZ off).
  static int64_t hpz_secondary_bound(const FlatLayout& layout, const Stage3Plan& stage3);

 private:
  struct Slot;
  // `quantize`: qwZ applies to the gathers for a layer's use, not to the re-gathers of
  // persistent groups after the step or to gather_to (DeepSpeed's all_gather_coalesced
  // quantizes only when the fetch asks for it).
  void fetch(int group, bool quantize);
  comm::WorkHandle start_gather(int group, void* dst, bool quantize);
  void wait(int group);
  void release(int group);
  void prefetch_after(int layer, bool backward);
  void keep_secondary(int group);
  // Groups whose forward gather is followed by a backward gather (hpZ keeps a copy of those).
  static std::vector<bool> regathered_in_backward(const FlatLayout& layout, const Stage3Plan& stage3);
  // Per group: kept gathered from its forward to its backward (stage3_max_reuse_distance).
  static std::vector<bool> kept_for_reuse(const FlatLayout& layout, const Stage3Plan& stage3);

  const FlatLayout& layout_;
  comm::Communicator& comm_;
  Device& device_;
  DType dtype_;
  size_t elem_;
  bool partitioned_;
  Stage3Plan s3_;
  std::unique_ptr<ParamHome> home_;  // the full array (stage 0–2) or the owned slices (stage 3)
  std::vector<Slot> slots_;
  std::vector<bool> persistent_, kept_for_reuse_;
  std::unique_ptr<comm::Communicator> hpz_;  // this rank's group of hpz_partition_size ranks
  std::vector<DeviceBuffer> secondary_;      // per group: the hpZ copy, while it exists
  bool backward_ = false, training_ = false;
  int64_t live_elements_ = 0, gathers_ = 0;
};

}  // namespace dscpp::runtime
