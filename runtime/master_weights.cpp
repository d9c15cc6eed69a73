#include "runtime/master_weights.h"

#include "kernels/cpu/amp/amp_cpu.h"

#include <algorithm>

namespace dscpp::runtime {

MasterWeights::MasterWeights(const FlatLayout& layout, ParamStore& params, Optimizer& optimizer, Device& device)
    : layout_(layout), params_(params), optimizer_(optimizer), device_(device) {
  if (params.dtype() != DType::f32)
    copy_ = DeviceBuffer(device, static_cast<size_t>(layout.part_total) * 4, MemCategory::optimizer_state, true);
  for (const PartitionGroup& g : layout.groups) {
    if (g.part == 0) {
      group_index_.push_back(-1);
      continue;
    }
    std::vector<Segment> segments;
    if (layout.parts == 1) {
      for (const ParamSlot& s : layout.params)
        if (s.offset >= g.begin && s.offset < g.begin + g.numel) segments.push_back({s.offset - g.begin, s.numel});
    } else {
      segments.push_back({0, g.part});
    }
    group_index_.push_back(optimizer.add_group(g.part, std::move(segments)));
  }
}

float* MasterWeights::group(int g) const {
  if (!copy_) return static_cast<float*>(params_.owned(g));
  return copy_.as<float>() + layout_.groups[static_cast<size_t>(g)].part_offset;
}

void MasterWeights::refresh_from_params() {
  if (!copy_) return;
  for (size_t g = 0; g < layout_.groups.size(); ++g)
    kernels::load_to_f32(params_.owned(static_cast<int>(g)), params_.dtype(), group(static_cast<int>(g)), 1.0f,
                         layout_.groups[g].part);
}

void MasterWeights::write_params() {
  if (!copy_) return;
  for (size_t g = 0; g < layout_.groups.size(); ++g)
    kernels::store_from_f32(params_.owned(static_cast<int>(g)), params_.dtype(), group(static_cast<int>(g)),
                            layout_.groups[g].part);
}

void MasterWeights::step(const std::function<void*(int)>& grads, DType grad_dtype, float grad_scale,
                         const StepOverrides& overrides) {
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    const PartitionGroup& g = layout_.groups[i];
    if (group_index_[i] < 0) continue;
    void* grad = grads(static_cast<int>(i));
    const float* grad32;
    if (grad_dtype == DType::f32) {
      kernels::scale_inplace(grad, DType::f32, grad_scale, g.part);
      grad32 = static_cast<const float*>(grad);
    } else {
      // 16-bit gradients are widened (and unscaled) into fp32 first: unscaling in place in
      // fp16 would flush small gradients to zero.
      if (scratch_.bytes() < static_cast<size_t>(g.part) * 4)
        scratch_ = DeviceBuffer(device_, static_cast<size_t>(g.part) * 4, MemCategory::buffers);
      kernels::load_to_f32(grad, grad_dtype, scratch_.as<float>(), grad_scale, g.part);
      grad32 = scratch_.as<float>();
    }
    optimizer_.step(group_index_[i], group(static_cast<int>(i)), grad32, overrides);
    if (copy_)
      kernels::store_from_f32(params_.owned(static_cast<int>(i)), params_.dtype(), group(static_cast<int>(i)), g.part);
  }
  scratch_.reset();
}

}  // namespace dscpp::runtime
