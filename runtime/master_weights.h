// The fp32 weights this rank updates, and the optimizer step over them.
//
// One optimizer group per partition group: this rank's slice of it (stage 0: the whole
// model); at stage 3, DeepSpeed's sub-groups: consecutive groups' slices merged up to
// sub_group_size elements. With fp32 parameters the master weights are the owned parameters themselves (no
// second copy: DeepSpeed keeps one, dscpp does not need it); with fp16/bf16 parameters they
// are a separate fp32 array of layout.part_total elements (category optimizer_state, the
// "master" of the ZeRO paper's K = 12 bytes), and after each step the updated slice is
// rounded into the 16-bit parameters. Offloaded parameters (offload_param) always get the
// separate master: the optimizer works on the device, the parameters' home is elsewhere.
//
// LAMB's trust ratio: per parameter at stage 0 (DeepSpeed's FusedLamb), per partition slice
// at stages 1–3 (DeepSpeed hands its optimizer one flat tensor per partition).
#pragma once

#include "core/device.h"
#include "runtime/flat_layout.h"
#include "runtime/optimizer.h"
#include "runtime/param_store.h"

#include <functional>

namespace dscpp::runtime {

class MasterWeights {
 public:
  // sub_group_size: stage 3 (partitioned parameters) only; 0 = one optimizer group per partition group.
  MasterWeights(const FlatLayout& layout, ParamStore& params, Optimizer& optimizer, Device& device,
                int64_t sub_group_size = 0);

  // master ← the owned parameters (after initialisation or loading 16-bit weights).
  void refresh_from_params();
  // The owned parameters ← master (after loading master weights).
  void write_params();
  // fp32 master slice of group g (g.part elements).
  float* group(int g) const;
  // One optimizer step of every group: gradient = grads(g) (g.part elements in `grad_dtype`) ×
  // grad_scale; then the 16-bit parameters follow. Does not communicate.
  void step(const std::function<void*(int group)>& grads, DType grad_dtype, float grad_scale,
            const StepOverrides& overrides);

  bool aliased() const { return !copy_; }
  // The optimizer group holding partition group g's slice (−1: an empty group), and where the
  // slice starts in it.
  int optimizer_group(int g) const { return group_index_[static_cast<size_t>(g)]; }
  int64_t optimizer_offset(int g) const { return group_offset_[static_cast<size_t>(g)]; }

 private:
  void write_group(int g);  // the owned parameters of group g ← master (rounded)

  const FlatLayout& layout_;
  ParamStore& params_;
  Optimizer& optimizer_;
  Device& device_;
  DeviceBuffer copy_;     // fp32 master when the parameters are 16-bit
  DeviceBuffer scratch_;  // one group's fp32 gradient when the gradients are 16-bit (category buffers)
  struct SubGroup {
    int first = 0;      // its first partition group; the slices of the following ones continue it
    int64_t numel = 0;  // Σ part
  };
  std::vector<SubGroup> subs_;  // optimizer group i = subs_[i]
  std::vector<int> group_index_;
  std::vector<int64_t> group_offset_;
};

}  // namespace dscpp::runtime
