// Gradient reduction across the data-parallel ranks, per ZeRO stage.
//
//   stage 0  gradients of the whole model accumulate over the micro-steps; during the last
//            micro-step's backward, buckets of reduce_bucket_size elements are allreduced as
//            soon as the layers they cover are done (the flat array is in forward order, so
//            buckets form from its tail).
//   stage 1  gradients of the whole model accumulate locally; during the last micro-step's
//            backward each partition group is reduce-scattered as soon as it is done, and the
//            result lands in this rank's slice of the whole array (through a bounded buffer: at
//            most two groups in flight), so no second, partitioned gradient array exists.
//   stage 2/3 only staging buffers of one group exist: each micro-step, each group's gradients
//            are written into a staging buffer, reduce-scattered as soon as the group's
//            backward is done and added into the gradient partition. With overlap_comm two
//            staging buffers alternate, so one group computes while the previous one is in
//            flight; without it, each reduction finishes before the next group starts. At stage
//            3 the staging is allocated when a micro-step's backward reaches its first group and
//            freed at its end (release_staging).
//
// Every reduction is pre_scale ×, SUM, post_scale ×: the factors of configs/plans.h
// GradScaling, which holds DeepSpeed's arithmetic for prescale_gradients,
// gradient_predivide_factor and the 1/dp of the mean at each stage. Where DeepSpeed divides by
// dp before the sum (stages 1–3 by default), the engine folds the 1/dp into the loss gradient
// instead (the same value, one pass fewer) and the reductions here are plain sums.
// reduce_scatter=false allreduces the group and keeps the own slice, as DeepSpeed does.
// communication_data_type other than the gradients' dtype: each bucket is converted into a wire
// buffer of that dtype, scaled, reduced, scaled and converted back, in DeepSpeed's order
// (fp16/bf16 wire data is still summed in fp32 by the Communicator and rounded once).
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/plans.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct GradReduceOptions {
  GradReduction reduction = GradReduction::allreduce;  // the ZeRO plan's (configs/plans.h)
  int64_t bucket_elements = 500000000;  // stage 0 allreduce buckets
  double pre_scale = 1.0;               // × each rank's gradients, in the wire dtype, before a reduction
  // × the reduced sum, in the wire dtype, after it. Unset: DeepSpeed's default mean, 1/dp after
  // the sum at stage 0, none at stages 1–3 (the engine's loss gradient carries the 1/dp).
  std::optional<double> post_scale;
  bool reduce_scatter = true;           // stages 1–3
  bool overlap = true;                  // stages 2–3: two staging buffers
  // Stages 2–3: micro-steps add into the partition (gradient accumulation), so a reduce-scatter
  // lands in a result buffer first; without, it writes straight into the partition.
  bool accumulates = true;
  // Stages 2–3: staging buffers exist only from the micro-step's first group to its end. At
  // stage 3 that lets them take the place of the gathered parameters backward releases, instead
  // of adding to the peak at the turn from forward to backward, when every kept group is gathered.
  bool release_staging = false;
  // The training device is host memory: a partition on the host device is reachable by the
  // collectives, so offload needs no reduce-scatter result buffer there.
  bool device_is_host = true;
  std::optional<DType> comm_dtype;      // communication_data_type; unset: the gradients' dtype
  // Stages 2–3: where the gradient partition lives; null = the training device. Optimizer
  // offload puts it on the host, where the offloaded optimizer reads it (DeepSpeed's CPU
  // master.grad). With a host-memory training device reductions land in it directly; with a
  // GPU they land in device staging and cross with one copy per group, summed on the host.
  Device* partition_device = nullptr;
  // With partition_device: how many leading elements of the partition live there; the rest
  // stays on the training device (partial optimizer offload: the gradients of the sub-groups
  // that step on the device). −1: all of them.
  int64_t partition_device_elements = -1;
  // ZeRO++ qgZ, stage 3 only (runtime/zero/zeropp.h): with more than one node of `ranks_per_node` ranks,
  // each group's reduce-scatter becomes the two-hop int4 all-to-all; on one node it stays a
  // plain reduce-scatter, as in DeepSpeed.
  bool quantized_gradients = false;
  int ranks_per_node = 1;
};

// The reducer's options for a run's plan at `zero` (the run's stage, or one the memory plan
// prices). `partition_device`: where an offloaded optimizer reads its gradients (null: none).
GradReduceOptions reduce_options_for(const TrainPlan& plan, const ZeroPlan& zero, bool device_is_host,
                                     int ranks_per_node, Device* partition_device);

class GradReducer {
 public:
  GradReducer(comm::Communicator& comm, const FlatLayout& layout, Device& device, DType dtype,
              const GradReduceOptions& options);
  ~GradReducer();

  // Before a micro-step's backward; `first`/`last`: its position in the accumulation window.
  void begin_micro(bool first, bool last);
  // The layer's gradient memory at element layout.layer_range[layer].first.
  void* layer_grads(int layer);
  // The layer's backward is done.
  void layer_done(int layer);
  // After the micro-step's backward: every reduction it started has finished.
  void end_micro();
  // The gradients this rank steps on for group g, in `dtype`: g.part elements (stage 0: the
  // whole group).
  void* owned(int group) const;
  // The memory owned(group) lies in: the partition device for the offloaded part, else the
  // training device.
  Device& owned_device(int group) const;
  // After the optimizer step.
  void zero();

  // The training-device bytes a reducer with these options allocates besides the gradients
  // (MemCategory::buffers): staging, reduce-scatter results, wire copies. The memory plan's.
  static int64_t buffer_bytes(const FlatLayout& layout, DType dtype, const GradReduceOptions& options, int world);
  // What those bytes are and which settings make them, for the memory plan ("" when none).
  static std::string buffer_reason(const FlatLayout& layout, DType dtype, const GradReduceOptions& options, int world);

  DType dtype() const { return dtype_; }
  // qgZ's node and cross-node groups (nullptr when qgZ is off or there is one node).
  const comm::Communicator* qgz_node() const { return qgz_node_.get(); }
  const comm::Communicator* qgz_cross() const { return qgz_cross_.get(); }
  int64_t reductions_last_micro() const { return reductions_; }

 private:
  struct Staging;
  void launch_bucket(int64_t begin, int64_t end);  // stage 0
  void launch_group(int group, void* input);       // stages 1–3
  void allocate_staging();
  void finish(Staging& s);
  char* at(const DeviceBuffer& b, int64_t element) const {
    return b.as<char>() + element * static_cast<int64_t>(elem_);
  }

  comm::Communicator& comm_;
  const FlatLayout& layout_;
  Device& device_;
  DType dtype_, wire_;  // gradients, communication
  size_t elem_, wire_elem_;
  GradReduceOptions opt_;
  double post_scale_;  // opt_.post_scale, resolved
  DeviceBuffer full_;          // stage 0/1: the whole model's gradients
  // Stages 2–3: this rank's gradient partitions; elements [0, split_) in off_partition_ (on
  // partition_device), the rest in partition_ (on the training device).
  DeviceBuffer off_partition_, partition_;
  int64_t split_ = 0;
  char* partition_at(int64_t element) const {
    return element < split_ ? at(off_partition_, element) : at(partition_, element - split_);
  }
  // Group g's partition slice is off the training device, which cannot reach it (a GPU and the
  // host): collectives cannot write into it, and results cross through host_staging_.
  bool crosses(int group) const;
  DeviceBuffer host_staging_;  // one group's reduced slice in the wire dtype, on the partition device
  std::vector<Staging> staging_;  // stage 1: reduce-scatter results in flight; stages 2–3: staging
  int current_ = -1;              // staging buffer of the group in backward
  bool first_ = true, last_ = true;
  int64_t pending_end_ = 0;       // stage 0: gradients in [.., pending_end_) not yet launched
  int64_t reductions_ = 0;
  struct Bucket {  // stage 0
    comm::WorkHandle work;
    int64_t begin = 0, end = 0;
    DeviceBuffer wire;  // the bucket in the communication dtype, when it differs
  };
  std::vector<Bucket> inflight_;
  std::unique_ptr<comm::Communicator> qgz_node_, qgz_cross_;
};

}  // namespace dscpp::runtime
