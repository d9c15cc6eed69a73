#include "runtime/master_weights.h"

#include "checkpoint/manifest.h"
#include "core/error.h"
#include "kernels/cpu/amp/amp_cpu.h"

#include <fmt/ranges.h>

#include <algorithm>

namespace dscpp::runtime {

std::vector<SubGroup> make_sub_groups(const FlatLayout& layout, bool partitioned, int64_t sub_group_size) {
  // Stage 3 (partitioned parameters): a rank's slices of consecutive groups are contiguous in
  // the master, the gradient partition and the parameters, so DeepSpeed's sub-groups are
  // ranges of groups, closed once they reach sub_group_size elements.
  const bool merge = partitioned && sub_group_size > 0;
  std::vector<SubGroup> subs;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const PartitionGroup& pg = layout.groups[g];
    if (pg.part == 0) continue;
    if (subs.empty() || !merge || subs.back().numel >= sub_group_size) subs.push_back({static_cast<int>(g), 0});
    subs.back().numel += pg.part;
  }
  return subs;
}

MasterWeights::MasterWeights(const FlatLayout& layout, ParamStore& params, Optimizer& optimizer, Device& device,
                             const MasterOptions& options)
    : layout_(layout),
      params_(params),
      optimizer_(optimizer),
      device_(device),
      options_(options),
      memory_(options.offload.device == OffloadDevice::none ? device : *options.host) {
  subs_ = make_sub_groups(layout, params.partitioned(), options.sub_group_size);
  group_index_.assign(layout.groups.size(), -1);
  group_offset_.assign(layout.groups.size(), 0);
  for (size_t i = 0; i < subs_.size(); ++i) {
    int64_t at = 0;
    for (size_t g = static_cast<size_t>(subs_[i].first); g < layout.groups.size() && at < subs_[i].numel; ++g) {
      if (layout.groups[g].part == 0) continue;
      group_index_[g] = static_cast<int>(i);
      group_offset_[g] = at;
      at += layout.groups[g].part;
    }
  }
  const bool swapped = options.offload.device == OffloadDevice::nvme && !subs_.empty();
  for (const SubGroup& sub : subs_) {
    const PartitionGroup& g = layout.groups[static_cast<size_t>(sub.first)];
    std::vector<Segment> segments;
    if (layout.parts == 1) {
      for (const ParamSlot& s : layout.params)
        if (s.offset >= g.begin && s.offset < g.begin + g.numel) segments.push_back({s.offset - g.begin, s.numel});
    } else {
      segments.push_back({0, sub.numel});
    }
    int index = swapped ? optimizer.add_external_group(sub.numel, std::move(segments))
                        : optimizer.add_group(sub.numel, std::move(segments));
    DSCPP_CHECK_EQ(index, static_cast<int>(&sub - subs_.data()));
  }
  if (swapped) {
    std::vector<int64_t> numels;
    for (const SubGroup& sub : subs_) numels.push_back(sub.numel);
    home_ = make_swapped_home(optimizer, numels, options.offload, options.rank);
  } else {
    // Offloaded, the master is always its own copy (DeepSpeed's pinned fp32 partition): the
    // parameters stay on the training device.
    aliased_ = !offloaded() && params.dtype() == DType::f32 && params.home().all_on_device();
    if (!aliased_)
      copy_ = DeviceBuffer(memory_, static_cast<size_t>(layout.part_total) * 4, MemCategory::optimizer_state, true);
    std::vector<float*> bases;
    for (const SubGroup& sub : subs_)
      bases.push_back(aliased_ ? static_cast<float*>(params.owned(sub.first))
                               : copy_.as<float>() + layout.groups[static_cast<size_t>(sub.first)].part_offset);
    home_ = make_resident_home(memory_, optimizer, std::move(bases));
  }
  if (offloaded() && !subs_.empty()) {
    int64_t largest = 0;
    for (const SubGroup& sub : subs_) largest = std::max(largest, sub.numel);
    scratch_ = DeviceBuffer(memory_, static_cast<size_t>(largest) * 4, MemCategory::buffers);
    if (params.dtype() != DType::f32)
      staging_ = DeviceBuffer(memory_, static_cast<size_t>(largest) * dtype_size(params.dtype()), MemCategory::buffers);
  }
}

MasterWeights::~MasterWeights() = default;

template <typename F>
void MasterWeights::for_groups(const SubGroup& sub, F&& f) const {
  int64_t at = 0;
  for (size_t g = static_cast<size_t>(sub.first); g < layout_.groups.size() && at < sub.numel; ++g) {
    if (layout_.groups[g].part == 0) continue;
    f(static_cast<int>(g), at);
    at += layout_.groups[g].part;
  }
}

void MasterWeights::params_to_master(const SubGroup& sub, float* master) {
  if (!params_.home().all_on_device()) {  // offload_param: wherever each slice lives
    for_groups(sub, [&](int g, int64_t at) {
      params_.home().read_f32(g, 0, layout_.groups[static_cast<size_t>(g)].part, master + at);
    });
    return;
  }
  const void* p = params_.owned(sub.first);
  if (!offloaded()) {
    kernels::load_to_f32(p, params_.dtype(), master, 1.0f, sub.numel);
  } else if (params_.dtype() == DType::f32) {
    device_.copy_to_host(master, p, static_cast<size_t>(sub.numel) * 4);
  } else {
    device_.copy_to_host(staging_.data(), p, static_cast<size_t>(sub.numel) * dtype_size(params_.dtype()));
    kernels::load_to_f32(staging_.data(), params_.dtype(), master, 1.0f, sub.numel);
  }
}

void MasterWeights::master_to_params(const SubGroup& sub, const float* master) {
  if (!params_.home().all_on_device()) {  // offload_param: each slice back to its home
    for_groups(sub, [&](int g, int64_t at) {
      params_.home().write_f32(g, 0, layout_.groups[static_cast<size_t>(g)].part, master + at);
    });
    return;
  }
  void* p = params_.owned(sub.first);
  if (!offloaded()) {
    kernels::store_from_f32(p, params_.dtype(), master, sub.numel);
  } else if (params_.dtype() == DType::f32) {
    device_.copy_from_host(p, master, static_cast<size_t>(sub.numel) * 4);
  } else {
    // DeepSpeed (since 0.14.3) copies the fp32 partition to the device and casts there; here
    // the cast happens on the host and half the bytes cross.
    kernels::store_from_f32(staging_.data(), params_.dtype(), master, sub.numel);
    device_.copy_from_host(p, staging_.data(), static_cast<size_t>(sub.numel) * dtype_size(params_.dtype()));
  }
}

void MasterWeights::refresh_from_params() {
  if (aliased_) return;
  for (size_t i = 0; i < subs_.size(); ++i) {
    SubGroupView v = home_->acquire(static_cast<int>(i));
    params_to_master(subs_[i], v.master);
    home_->release(static_cast<int>(i), true);
  }
  home_->flush();
}

void MasterWeights::write_params() {
  if (aliased_) return;
  for (size_t i = 0; i < subs_.size(); ++i) {
    SubGroupView v = home_->acquire(static_cast<int>(i));
    master_to_params(subs_[i], v.master);
    home_->release(static_cast<int>(i), false);
  }
  home_->flush();
}

const float* MasterWeights::fp32_gradient(const SubGroup& sub, void* grad, DType grad_dtype, float grad_scale) {
  if (grad_dtype == DType::f32 && !offloaded()) {
    kernels::scale_inplace(grad, DType::f32, grad_scale, sub.numel);
    return static_cast<const float*>(grad);
  }
  // 16-bit gradients are widened (and unscaled) into fp32 first: unscaling in place in fp16
  // would flush small gradients to zero. Offloaded, the optimizer reads host memory: the
  // gradient crosses into it here (the same multiplication as scale_inplace, so the result
  // is bit-identical to the resident path).
  if (scratch_.bytes() < static_cast<size_t>(sub.numel) * 4)
    scratch_ = DeviceBuffer(memory_, static_cast<size_t>(sub.numel) * 4, MemCategory::buffers);
  kernels::load_to_f32(grad, grad_dtype, scratch_.as<float>(), grad_scale, sub.numel);
  return scratch_.as<float>();
}

void MasterWeights::step(const std::function<void*(int)>& grads, DType grad_dtype, float grad_scale,
                         const StepOverrides& overrides) {
  for (size_t i = 0; i < subs_.size(); ++i) {
    const SubGroup& sub = subs_[i];
    SubGroupView v = home_->acquire(static_cast<int>(i));
    home_->prefetch(static_cast<int>(i) + 1);  // pipeline_read: in flight while this one steps
    optimizer_.step(static_cast<int>(i), v.master, fp32_gradient(sub, grads(sub.first), grad_dtype, grad_scale),
                    overrides);
    if (!aliased_) master_to_params(sub, v.master);
    home_->release(static_cast<int>(i), true);  // pipeline_write: written while the next one steps
  }
  if (!offloaded()) scratch_.reset();  // device memory: held only during the step
  // NVMe: sub-group 0's read overlaps the parameter allgather and the next forward/backward
  // (its slots are not written again before the next step acquires it).
  if (!subs_.empty()) home_->prefetch(0);
}

float* MasterWeights::array(int sub, const SubGroupView& v, const std::string& what) const {
  if (what == ckpt::kMasterWeights) return v.master;
  // By the optimizer's current names: SGD may have created its momentum buffer since.
  std::vector<std::string> names;
  for (const StateTensor& s : optimizer_.state(sub)) names.push_back(s.name);
  for (size_t i = 0; i < names.size() && i < v.state.size(); ++i)
    if (names[i] == what) return v.state[i];
  fail("optimizer {} has no state '{}' (it has: {})", optimizer_.name(), what, fmt::join(names, ", "));
}

void MasterWeights::copy_out(const std::string& what, int g, int64_t offset, int64_t count, float* host) {
  const int sub = optimizer_group(g);
  DSCPP_CHECK_GE(sub, 0);
  SubGroupView v = home_->acquire(sub);
  home_->memory().copy_to_host(host, array(sub, v, what) + optimizer_offset(g) + offset, static_cast<size_t>(count) * 4);
  home_->release(sub, false, false);
}

void MasterWeights::copy_in(const std::string& what, int g, int64_t offset, int64_t count, const float* host) {
  const int sub = optimizer_group(g);
  DSCPP_CHECK_GE(sub, 0);
  SubGroupView v = home_->acquire(sub);
  home_->memory().copy_from_host(array(sub, v, what) + optimizer_offset(g) + offset, host, static_cast<size_t>(count) * 4);
  home_->release(sub, true, false);
}

void MasterWeights::flush() {
  home_->flush();
}

}  // namespace dscpp::runtime
