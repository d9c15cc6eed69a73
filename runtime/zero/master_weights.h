// The fp32 weights this rank updates, and the optimizer step over them.
//
// One optimizer group per partition group: this rank's slice of it (stage 0: the whole
// model); at stage 3, DeepSpeed's sub-groups: consecutive groups' slices merged up to
// sub_group_size elements. Without offload and with fp32 parameters the master weights are
// the owned parameters themselves (no second copy: DeepSpeed keeps one, dscpp does not need
// it); with fp16/bf16 parameters they are a separate fp32 array of layout.part_total elements
// (category optimizer_state, the "master" of the ZeRO paper's K = 12 bytes), and after each
// step the updated slice is rounded into the 16-bit parameters.
//
// Where the master and the optimizer state live is a StateHome (runtime/offload/optimizer_offload.h):
// the training device; the host (offload_optimizer cpu: the master is always a separate copy
// there, the fp32 gradient the optimizer reads is widened into host memory, and the updated
// parameters go back with Device::copy_from_host); or NVMe (swapped per sub-group). With
// offload_optimizer ratio < 1 (stage 3) only the first sub-groups are offloaded (OffloadSplit);
// the others keep a separate fp32 master, their state and their step scratch on the training
// device, and step there like sub-groups without offload. Each sub-group's path (scratch,
// staging, copy-back) follows where it lives.
//
// Offloaded parameters (offload_param: the owned slices live in ParamHome's host memory or
// swap file) are never the master either, and the master ⇄ parameter moves go group by group
// through ParamHome.
//
// LAMB's trust ratio: per parameter at stage 0 (DeepSpeed's FusedLamb), per partition slice
// at stages 1–3 (DeepSpeed hands its optimizer one flat tensor per partition).
#pragma once

#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/offload/optimizer_offload.h"
#include "runtime/optim/optimizer.h"
#include "runtime/zero/param_store.h"

#include <functional>
#include <memory>
#include <string>

namespace dscpp::runtime {

// An optimizer group: a run of consecutive partition groups whose owned slices are contiguous.
struct SubGroup {
  int first = 0;      // its first partition group; the slices of the following ones continue it
  int64_t numel = 0;  // Σ part
};
// sub_group_size: merge consecutive groups (stage 3, `partitioned`) up to that many elements;
// 0 = one sub-group per non-empty partition group.
std::vector<SubGroup> make_sub_groups(const FlatLayout& layout, bool partitioned, int64_t sub_group_size);

// Partial optimizer offload: the first `offloaded` sub-groups are offloaded, the others stay on
// the training device. Sub-groups are consecutive in the rank's partition, so the offloaded
// ones hold exactly its first `offloaded_elements` elements (the gradient partition splits
// there too).
struct OffloadSplit {
  int offloaded = 0;
  int resident = 0;                // on the training device
  int64_t offloaded_elements = 0;  // Σ numel of the offloaded sub-groups
  int64_t largest_offloaded = 0;   // numel of the largest of them (host scratch, swap slots)
};
OffloadSplit offload_split(const std::vector<SubGroup>& subs, const OptimizerOffloadPlan& offload);

struct MasterOptions {
  int64_t sub_group_size = 0;  // stage 3 (partitioned parameters) only
  OptimizerOffloadPlan offload;    // device none: everything on the training device
  Device* host = nullptr;      // offload: host memory for the master, state and fp32 gradients
  int rank = 0;                // names the NVMe swap directory; this rank's slice of each group
  OptimizerGroupsPlan groups;  // the parameter roles weight decay skips

  // As a run's plan says: its stage-3 sub-groups, optimizer offload and weight-decay groups.
  static MasterOptions for_plan(const TrainPlan& plan, Device* host, int rank) {
    return {plan.zero.sub_group_size, plan.optimizer_offload, host, rank, plan.groups};
  }
};

class MasterWeights {
 public:
  // Each sub-group's optimizer state is placed with Optimizer::add_group_on (offloaded: on
  // `*options.host`, else on `device`), whatever device the optimizer was made with.
  MasterWeights(const FlatLayout& layout, ParamStore& params, Optimizer& optimizer, Device& device,
                const MasterOptions& options = {});
  ~MasterWeights();

  // master ← the owned parameters (after initialisation or loading 16-bit weights).
  void refresh_from_params();
  // The owned parameters ← master (after loading master weights).
  void write_params();
  // One optimizer step of every group: gradient = grads(g) (g.part elements in `grad_dtype`) ×
  // grad_scale; then the parameters follow. Does not communicate.
  void step(const std::function<void*(int group)>& grads, DType grad_dtype, float grad_scale,
            const StepOverrides& overrides);

  // Elements [offset, offset + count) of partition group g's slice of `what` (ckpt's
  // kMasterWeights, "fp32", or an optimizer state name) ⇄ host memory, wherever it lives.
  void copy_out(const std::string& what, int g, int64_t offset, int64_t count, float* host);
  void copy_in(const std::string& what, int g, int64_t offset, int64_t count, const float* host);
  // Every change made through copy_in has reached the home (NVMe: written out).
  void flush();

  bool aliased() const { return aliased_; }
  bool offloaded() const { return options_.offload.device != OffloadDevice::none; }
  const OffloadSplit& split() const { return split_; }
  // The optimizer group holding partition group g's slice (−1: an empty group), and where the
  // slice starts in it.
  int optimizer_group(int g) const { return group_index_[static_cast<size_t>(g)]; }
  int64_t optimizer_offset(int g) const { return group_offset_[static_cast<size_t>(g)]; }
  const std::vector<SubGroup>& sub_groups() const { return subs_; }
  SwapStats swap_stats() const { return home_->swap_stats(); }
  int64_t swap_pool_bytes() const { return home_->pool_bytes(); }

 private:
  void exclude_from_weight_decay(const OptimizerGroupsPlan& groups);
  float* array(int sub, const SubGroupView& v, const std::string& what) const;
  // Calls f(group, offset in the sub-group) for each non-empty partition group of `sub`.
  template <typename F>
  void for_groups(const SubGroup& sub, F&& f) const;
  // Sub-group i is offloaded: its master, state and step scratch live on the host (or NVMe).
  bool offloaded(int i) const { return i < split_.offloaded; }
  Device& memory(int i) const { return offloaded(i) ? *options_.host : device_; }
  void params_to_master(int i, float* master);
  void master_to_params(int i, const float* master);
  const float* fp32_gradient(int i, void* grad, DType grad_dtype, float grad_scale);

  const FlatLayout& layout_;
  ParamStore& params_;
  Optimizer& optimizer_;
  Device& device_;
  MasterOptions options_;
  bool aliased_ = false;  // the fp32 parameters are the master
  // Resident homes: the fp32 master when it is not the parameters, split where the partition
  // splits (offload cpu: the offloaded sub-groups' elements on the host, the rest on the device).
  DeviceBuffer host_master_, device_master_;
  DeviceBuffer host_scratch_;    // offloaded sub-groups: one's fp32 gradient (category buffers)
  DeviceBuffer device_scratch_;  // the others: one's fp32 gradient, held only during the step
  DeviceBuffer grad_crossing_;   // stage 1 on a GPU: an offloaded group's gradient copied to the host
  DeviceBuffer staging_;  // offload, 16-bit parameters: one sub-group's parameters on the host
  DeviceBuffer home_staging_;  // offload_param with a GPU master: one group's fp32 slice on the host
  std::vector<SubGroup> subs_;  // optimizer group i = subs_[i]
  OffloadSplit split_;
  std::vector<int> group_index_;
  std::vector<int64_t> group_offset_;
  std::unique_ptr<StateHome> home_;
};

}  // namespace dscpp::runtime
