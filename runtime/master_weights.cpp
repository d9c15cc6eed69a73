#include "runtime/master_weights.h"

#include "core/error.h"
#include "kernels/cpu/amp/amp_cpu.h"

#include <algorithm>

namespace dscpp::runtime {

MasterWeights::MasterWeights(const FlatLayout& layout, ParamStore& params, Optimizer& optimizer, Device& device,
                             int64_t sub_group_size)
    : layout_(layout), params_(params), optimizer_(optimizer), device_(device) {
  // The optimizer steps on the device: offloaded parameters (offload_param) cannot be the
  // master even in fp32 (DeepSpeed keeps its fp32 partitions on the device then too).
  if (params.dtype() != DType::f32 || !params.home().all_on_device())
    copy_ = DeviceBuffer(device, static_cast<size_t>(layout.part_total) * 4, MemCategory::optimizer_state, true);
  // Stage 3 (partitioned parameters): a rank's slices of consecutive groups are contiguous in
  // the master, the gradient partition and the parameters, so DeepSpeed's sub-groups are
  // ranges of groups, closed once they reach sub_group_size elements.
  const bool merge = params.partitioned() && sub_group_size > 0;
  group_index_.assign(layout.groups.size(), -1);
  group_offset_.assign(layout.groups.size(), 0);
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const PartitionGroup& pg = layout.groups[g];
    if (pg.part == 0) continue;
    if (subs_.empty() || !merge || subs_.back().numel >= sub_group_size) subs_.push_back({static_cast<int>(g), 0});
    SubGroup& sub = subs_.back();
    group_index_[g] = static_cast<int>(subs_.size()) - 1;
    group_offset_[g] = sub.numel;
    sub.numel += pg.part;
  }
  for (SubGroup& sub : subs_) {
    const PartitionGroup& g = layout.groups[static_cast<size_t>(sub.first)];
    std::vector<Segment> segments;
    if (layout.parts == 1) {
      for (const ParamSlot& s : layout.params)
        if (s.offset >= g.begin && s.offset < g.begin + g.numel) segments.push_back({s.offset - g.begin, s.numel});
    } else {
      segments.push_back({0, sub.numel});
    }
    DSCPP_CHECK_EQ(optimizer.add_group(sub.numel, std::move(segments)), static_cast<int>(&sub - subs_.data()));
  }
}

float* MasterWeights::group(int g) const {
  if (!copy_) return static_cast<float*>(params_.owned(g));
  return copy_.as<float>() + layout_.groups[static_cast<size_t>(g)].part_offset;
}

void MasterWeights::refresh_from_params() {
  if (!copy_) return;
  for (size_t g = 0; g < layout_.groups.size(); ++g)
    params_.home().read_f32(static_cast<int>(g), 0, layout_.groups[g].part, group(static_cast<int>(g)));
}

void MasterWeights::write_params() {
  if (!copy_) return;
  for (size_t g = 0; g < layout_.groups.size(); ++g) write_group(static_cast<int>(g));
}

void MasterWeights::write_group(int g) {
  params_.home().write_f32(g, 0, layout_.groups[static_cast<size_t>(g)].part, group(g));
}

void MasterWeights::step(const std::function<void*(int)>& grads, DType grad_dtype, float grad_scale,
                         const StepOverrides& overrides) {
  for (size_t i = 0; i < subs_.size(); ++i) {
    const SubGroup& sub = subs_[i];
    void* grad = grads(sub.first);
    const float* grad32;
    if (grad_dtype == DType::f32) {
      kernels::scale_inplace(grad, DType::f32, grad_scale, sub.numel);
      grad32 = static_cast<const float*>(grad);
    } else {
      // 16-bit gradients are widened (and unscaled) into fp32 first: unscaling in place in
      // fp16 would flush small gradients to zero.
      if (scratch_.bytes() < static_cast<size_t>(sub.numel) * 4)
        scratch_ = DeviceBuffer(device_, static_cast<size_t>(sub.numel) * 4, MemCategory::buffers);
      kernels::load_to_f32(grad, grad_dtype, scratch_.as<float>(), grad_scale, sub.numel);
      grad32 = scratch_.as<float>();
    }
    optimizer_.step(static_cast<int>(i), group(sub.first), grad32, overrides);
    // The parameters follow, group by group (each may live elsewhere: device, host, NVMe).
    if (copy_)
      for (size_t g = static_cast<size_t>(sub.first); g < layout_.groups.size() && group_index_[g] <= static_cast<int>(i); ++g)
        if (group_index_[g] == static_cast<int>(i)) write_group(static_cast<int>(g));
  }
  scratch_.reset();
}

}  // namespace dscpp::runtime
