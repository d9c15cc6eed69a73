#include "runtime/zero/master_weights.h"

#include "checkpoint/manifest.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/device_math.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

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

OffloadSplit offload_split(const std::vector<SubGroup>& subs, const OptimizerOffloadPlan& offload) {
  OffloadSplit s;
  s.offloaded = offloaded_sub_groups(offload, static_cast<int>(subs.size()));
  s.resident = static_cast<int>(subs.size()) - s.offloaded;
  for (int i = 0; i < s.offloaded; ++i) {
    s.offloaded_elements += subs[static_cast<size_t>(i)].numel;
    s.largest_offloaded = std::max(s.largest_offloaded, subs[static_cast<size_t>(i)].numel);
  }
  return s;
}

MasterWeights::MasterWeights(const FlatLayout& layout, ParamStore& params, Optimizer& optimizer, Device& device,
                             const MasterOptions& options)
    : layout_(layout), params_(params), optimizer_(optimizer), device_(device), options_(options) {
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
  split_ = offload_split(subs_, options.offload);
  const int count = static_cast<int>(subs_.size());
  const bool swapped = options.offload.device == OffloadDevice::nvme;
  for (int i = 0; i < count; ++i) {
    const SubGroup& sub = subs_[static_cast<size_t>(i)];
    const PartitionGroup& g = layout.groups[static_cast<size_t>(sub.first)];
    std::vector<Segment> segments;
    if (layout.parts == 1) {
      for (const ParamSlot& s : layout.params)
        if (s.offset >= g.begin && s.offset < g.begin + g.numel) segments.push_back({s.offset - g.begin, s.numel});
    } else {
      segments.push_back({0, sub.numel});
    }
    int index = swapped && offloaded(i) ? optimizer.add_external_group(sub.numel, std::move(segments))
                                        : optimizer.add_group_on(memory(i), sub.numel, std::move(segments));
    DSCPP_CHECK_EQ(index, i);
  }
  exclude_from_weight_decay(options.groups);
  // Offloaded, the master is always its own copy (DeepSpeed's pinned fp32 partition): the
  // parameters stay on the training device. DeepSpeed keeps one for the sub-groups a partial
  // offload leaves on the device too; so does dscpp, which keeps one rule for the plan.
  aliased_ = !offloaded() && params.dtype() == DType::f32 && params.home().all_on_device();
  const int64_t split = split_.offloaded_elements;
  if (!aliased_) {
    if (!swapped && split > 0)
      host_master_ = DeviceBuffer(*options.host, static_cast<size_t>(split) * 4, MemCategory::optimizer_state, true);
    if (split_.resident > 0)
      device_master_ =
          DeviceBuffer(device, static_cast<size_t>(layout.part_total - split) * 4, MemCategory::optimizer_state, true);
  }
  std::vector<float*> bases(subs_.size(), nullptr);
  for (int i = 0; i < count; ++i) {
    const int first = subs_[static_cast<size_t>(i)].first;
    const int64_t at = layout.groups[static_cast<size_t>(first)].part_offset;
    if (aliased_)
      bases[static_cast<size_t>(i)] = static_cast<float*>(params.owned(first));
    else if (!offloaded(i))
      bases[static_cast<size_t>(i)] = device_master_.as<float>() + (at - split);
    else if (!swapped)
      bases[static_cast<size_t>(i)] = host_master_.as<float>() + at;
  }
  std::unique_ptr<StateHome> off, resident;
  if (split_.offloaded > 0) {
    if (swapped) {
      std::vector<int64_t> numels;
      for (int i = 0; i < split_.offloaded; ++i) numels.push_back(subs_[static_cast<size_t>(i)].numel);
      off = make_swapped_home(optimizer, numels, options.offload, options.rank);
    } else {
      off = make_resident_home(*options.host, optimizer, bases);
    }
  }
  if (split_.resident > 0 || !off) resident = make_resident_home(device, optimizer, std::move(bases));
  home_ = !off        ? std::move(resident)
          : !resident ? std::move(off)
                      : make_split_home(std::move(off), split_.offloaded, std::move(resident));
  if (split_.offloaded > 0) {
    host_scratch_ =
        DeviceBuffer(*options.host, static_cast<size_t>(split_.largest_offloaded) * 4, MemCategory::buffers);
    if (params.dtype() != DType::f32)
      staging_ = DeviceBuffer(*options.host, static_cast<size_t>(split_.largest_offloaded) * dtype_size(params.dtype()),
                              MemCategory::buffers);
  }
  if (!params.home().all_on_device() && !device.is_host()) {  // offload_param with a GPU master
    int64_t widest = 0;
    for (const PartitionGroup& g : layout.groups) widest = std::max(widest, g.part);
    home_staging_ = DeviceBuffer(*options.host, static_cast<size_t>(widest) * 4, MemCategory::buffers);
  }
  if (options.rank == 0 && offloaded() && options.offload.ratio < 1.0)
    log::info(
        "offload_optimizer ratio {}: {} of {} sub-groups offloaded to {} ({} elements of this rank's {}), {} "
        "stay on the training device",
        options.offload.ratio, split_.offloaded, count, offload_device_name(options.offload.device), split,
        layout.part_total, split_.resident);
}

MasterWeights::~MasterWeights() = default;

namespace {
bool skips_decay(const OptimizerGroupsPlan& g, dscpp_param_role role) {
  return (role == DSCPP_ROLE_BIAS && g.no_decay_bias) || (role == DSCPP_ROLE_NORM && g.no_decay_norm) ||
         (role == DSCPP_ROLE_EMBEDDING && g.no_decay_embedding);
}
}  // namespace

// Each parameter the plan exempts, cut to this rank's slice of its partition group, as a range
// of the sub-group that slice lies in.
void MasterWeights::exclude_from_weight_decay(const OptimizerGroupsPlan& groups) {
  if (!groups.any()) return;
  std::vector<std::vector<Segment>> ranges(subs_.size());
  std::set<std::string> roles;
  int64_t tensors = 0, elements = 0;
  for (const ParamSlot& s : layout_.params) {
    if (!skips_decay(groups, s.role)) continue;
    roles.insert(role_name(s.role));
    ++tensors, elements += s.numel;
    const size_t gi = static_cast<size_t>(layout_.layer_group[static_cast<size_t>(s.layer)]);
    const PartitionGroup& g = layout_.groups[gi];
    if (group_index_[gi] < 0) continue;
    const int64_t own = layout_.parts == 1 ? g.begin : g.owned_begin(options_.rank);
    const int64_t lo = std::max(s.offset, own), hi = std::min(s.offset + s.numel, own + g.part);
    if (lo < hi) ranges[static_cast<size_t>(group_index_[gi])].push_back({group_offset_[gi] + lo - own, hi - lo});
  }
  for (size_t i = 0; i < ranges.size(); ++i)
    if (!ranges[i].empty()) optimizer_.exclude_from_weight_decay(static_cast<int>(i), std::move(ranges[i]));
  if (options_.rank == 0)
    log::info("weight decay: none on {} of the {} parameter tensors ({} elements; role {}: dscpp.no_weight_decay)",
              tensors, layout_.params.size(), elements, fmt::join(roles, ", "));
}

template <typename F>
void MasterWeights::for_groups(const SubGroup& sub, F&& f) const {
  int64_t at = 0;
  for (size_t g = static_cast<size_t>(sub.first); g < layout_.groups.size() && at < sub.numel; ++g) {
    if (layout_.groups[g].part == 0) continue;
    f(static_cast<int>(g), at);
    at += layout_.groups[g].part;
  }
}

void MasterWeights::params_to_master(int i, float* master) {
  const SubGroup& sub = subs_[static_cast<size_t>(i)];
  if (!params_.home().all_on_device()) {  // offload_param: wherever each slice lives
    for_groups(sub, [&](int g, int64_t at) {
      const int64_t part = layout_.groups[static_cast<size_t>(g)].part;
      if (memory(i).is_host()) return params_.home().read_f32(g, 0, part, master + at);
      // The homes are host memory, the master is on a GPU: widen on the host, then one copy.
      params_.home().read_f32(g, 0, part, home_staging_.as<float>());
      memory(i).copy_from_host(master + at, home_staging_.data(), static_cast<size_t>(part) * 4);
    });
    return;
  }
  const void* p = params_.owned(sub.first);
  if (!offloaded(i)) {
    kernels::math_of(memory(i)).load_to_f32(p, params_.dtype(), master, 1.0f, sub.numel);
  } else if (params_.dtype() == DType::f32) {
    device_.copy_to_host(master, p, static_cast<size_t>(sub.numel) * 4);
  } else {
    device_.copy_to_host(staging_.data(), p, static_cast<size_t>(sub.numel) * dtype_size(params_.dtype()));
    kernels::math_of(memory(i)).load_to_f32(staging_.data(), params_.dtype(), master, 1.0f, sub.numel);
  }
}

void MasterWeights::master_to_params(int i, const float* master) {
  const SubGroup& sub = subs_[static_cast<size_t>(i)];
  if (!params_.home().all_on_device()) {  // offload_param: each slice back to its home
    for_groups(sub, [&](int g, int64_t at) {
      const int64_t part = layout_.groups[static_cast<size_t>(g)].part;
      if (memory(i).is_host()) return params_.home().write_f32(g, 0, part, master + at);
      memory(i).copy_to_host(home_staging_.data(), master + at, static_cast<size_t>(part) * 4);  // as above
      params_.home().write_f32(g, 0, part, home_staging_.as<float>());
    });
    return;
  }
  void* p = params_.owned(sub.first);
  if (!offloaded(i)) {
    kernels::math_of(memory(i)).store_from_f32(p, params_.dtype(), master, sub.numel);
  } else if (params_.dtype() == DType::f32) {
    device_.copy_from_host(p, master, static_cast<size_t>(sub.numel) * 4);
  } else {
    // DeepSpeed (since 0.14.3) copies the fp32 partition to the device and casts there; here
    // the cast happens on the host and half the bytes cross.
    kernels::math_of(memory(i)).store_from_f32(staging_.data(), params_.dtype(), master, sub.numel);
    device_.copy_from_host(p, staging_.data(), static_cast<size_t>(sub.numel) * dtype_size(params_.dtype()));
  }
}

void MasterWeights::refresh_from_params() {
  if (aliased_) return;
  for (size_t i = 0; i < subs_.size(); ++i) {
    SubGroupView v = home_->acquire(static_cast<int>(i));
    params_to_master(static_cast<int>(i), v.master);
    home_->release(static_cast<int>(i), true);
  }
  home_->flush();
}

void MasterWeights::write_params() {
  if (aliased_) return;
  for (size_t i = 0; i < subs_.size(); ++i) {
    SubGroupView v = home_->acquire(static_cast<int>(i));
    master_to_params(static_cast<int>(i), v.master);
    home_->release(static_cast<int>(i), false);
  }
  home_->flush();
}

const float* MasterWeights::fp32_gradient(int i, void* grad, DType grad_dtype, float grad_scale) {
  const SubGroup& sub = subs_[static_cast<size_t>(i)];
  if (grad_dtype == DType::f32 && !offloaded(i)) {
    kernels::math_of(memory(i)).scale_inplace(grad, DType::f32, grad_scale, sub.numel);
    return static_cast<const float*>(grad);
  }
  // 16-bit gradients are widened (and unscaled) into fp32 first: unscaling in place in fp16
  // would flush small gradients to zero. Offloaded, the optimizer reads host memory: the
  // gradient crosses into it here (the same multiplication as scale_inplace, so the result
  // is bit-identical to the resident path).
  // At stage 1 an offloaded group's reduced gradient is still in the training device's
  // whole-model array (stages 2-3 reduce it into host memory): on a GPU it crosses here.
  if (offloaded(i) && device_.holds(grad)) {
    const size_t bytes = static_cast<size_t>(sub.numel) * dtype_size(grad_dtype);
    if (grad_crossing_.bytes() < bytes) grad_crossing_ = DeviceBuffer(*options_.host, bytes, MemCategory::buffers);
    device_.copy_to_host(grad_crossing_.data(), grad, bytes);
    grad = grad_crossing_.data();
  }
  DeviceBuffer& scratch = offloaded(i) ? host_scratch_ : device_scratch_;
  if (scratch.bytes() < static_cast<size_t>(sub.numel) * 4)
    scratch = DeviceBuffer(memory(i), static_cast<size_t>(sub.numel) * 4, MemCategory::buffers);
  kernels::math_of(memory(i)).load_to_f32(grad, grad_dtype, scratch.as<float>(), grad_scale, sub.numel);
  return scratch.as<float>();
}

void MasterWeights::step(const std::function<void*(int)>& grads, DType grad_dtype, float grad_scale,
                         const StepOverrides& overrides) {
  for (size_t i = 0; i < subs_.size(); ++i) {
    const SubGroup& sub = subs_[i];
    SubGroupView v = home_->acquire(static_cast<int>(i));
    home_->prefetch(static_cast<int>(i) + 1);  // pipeline_read: in flight while this one steps
    optimizer_.step(static_cast<int>(i), v.master,
                    fp32_gradient(static_cast<int>(i), grads(sub.first), grad_dtype, grad_scale), overrides);
    if (!aliased_) master_to_params(static_cast<int>(i), v.master);
    home_->release(static_cast<int>(i), true);  // pipeline_write: written while the next one steps
  }
  device_scratch_.reset();  // device memory: held only during the step
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
  home_->memory(sub).copy_to_host(host, array(sub, v, what) + optimizer_offset(g) + offset,
                                  static_cast<size_t>(count) * 4);
  home_->release(sub, false, false);
}

void MasterWeights::copy_in(const std::string& what, int g, int64_t offset, int64_t count, const float* host) {
  const int sub = optimizer_group(g);
  DSCPP_CHECK_GE(sub, 0);
  SubGroupView v = home_->acquire(sub);
  home_->memory(sub).copy_from_host(array(sub, v, what) + optimizer_offset(g) + offset, host,
                                    static_cast<size_t>(count) * 4);
  home_->release(sub, true, false);
}

void MasterWeights::flush() {
  home_->flush();
}

}  // namespace dscpp::runtime
