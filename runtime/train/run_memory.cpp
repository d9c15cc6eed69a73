#include "runtime/train/run_memory.h"

#include "core/zero_estimate.h"
#include "offload/aligned_buffer.h"
#include "runtime/model/frozen_params.h"
#include "runtime/observe/train_log.h"
#include "runtime/offload/optimizer_offload.h"
#include "runtime/offload/param_home.h"
#include "runtime/zero/grad_reducer.h"
#include "runtime/zero/master_weights.h"
#include "runtime/zero/param_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace dscpp::runtime {

RunMemory::RunMemory(const std::vector<LayerDecl>& layers, const TrainPlan& plan, RunMemoryFacts facts)
    : layers_(layers), plan_(plan), facts_(std::move(facts)) {}

OptimizerOffloadPlan RunMemory::optimizer_offload() const {
  return facts_.training ? plan_.optimizer_offload : OptimizerOffloadPlan{};
}

MemorySetting RunMemory::setting(int world) const {
  return {plan_.zero.stage, optimizer_offload().device != OffloadDevice::none,
          plan_.param_offload.device != OffloadDevice::none, world};
}

MemoryPlan RunMemory::plan(const FlatLayout& layout, int world, const FlatLayout* frozen) const {
  return plan_with(layout, plan_.zero, optimizer_offload(), plan_.param_offload, world, frozen);
}

MemoryPlan RunMemory::plan_for(const MemorySetting& s) const {
  const ZeroPlan& zero = plan_.zero_at_stage[static_cast<size_t>(s.stage)];
  const OptimizerOffloadPlan own = optimizer_offload();
  const Grouping grouping = grouping_for(zero, s.ranks);
  const bool split = count_frozen(layers_).frozen_params > 0;
  const FlatLayout frozen = split ? make_flat_layout(layers_, grouping, ParamSet::frozen) : FlatLayout{};
  return plan_with(make_flat_layout(layers_, grouping, split ? ParamSet::trainable : ParamSet::all), zero,
                   !s.offload_optimizer               ? OptimizerOffloadPlan{}
                   : own.device == OffloadDevice::cpu ? own
                                                      : plan_.cpu_optimizer_offload,
                   s.offload_param ? plan_.cpu_param_offload : ParamOffloadPlan{}, s.ranks, split ? &frozen : nullptr);
}

namespace {
// The frozen parameters: a second parameter store of the same kind (model_params.h), placed,
// gathered and offloaded as the first; no gradients or optimizer state.
void add_frozen(MemoryPlan& p, const FlatLayout& frozen, const ZeroPlan& zero, const ParamOffloadPlan& offload,
                const Stage3Plan& s3, DType dtype, DType compute) {
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  const auto params = static_cast<size_t>(MemCategory::params);
  const bool off = zero.parameters_partitioned && offload.device != OffloadDevice::none;
  int64_t device = zero.parameters_partitioned ? (off ? 0 : frozen.part_total) : frozen.total;
  if (zero.parameters_partitioned) {
    const int64_t live = ParamStore::gathered_bound(frozen, s3) + ParamStore::hpz_secondary_bound(frozen, s3);
    device += live;
    p.items.push_back({MemCategory::params, live * e,
                       "frozen parameters gathered: " + ParamStore::gathered_reason(frozen, s3, dtype_size(dtype))});
  }
  p.bytes[params] += device * e;
  if (off) {
    const ParamHome::Placement placed = ParamHome::place(frozen, dtype, offload);
    p.host[params] += placed.host_elements * e;
    p.nvme[params] += placed.nvme_elements * e;
    if (placed.slots > 0)
      p.host[static_cast<size_t>(MemCategory::buffers)] +=
          offload.buffer_count * offload::round_up(placed.largest_swapped * e, offload::kDirectIoAlignment);
  }
  if (dtype != compute) {
    p.bytes[static_cast<size_t>(MemCategory::buffers)] += frozen.max_layer_numel * 4;
    p.items.push_back({MemCategory::buffers, frozen.max_layer_numel * 4,
                       "fp32 compute over 16-bit parameters: the largest layer's frozen parameters in fp32"});
  }
}
}  // namespace

MemoryPlan RunMemory::plan_with(const FlatLayout& layout, const ZeroPlan& zero, const OptimizerOffloadPlan& opt_off,
                                const ParamOffloadPlan& offload, int world, const FlatLayout* frozen) const {
  const Stage3Plan& s3 = plan_.stage3;
  MemoryPlanInputs mp;
  mp.zero = zero;
  mp.world = world;
  mp.dtype = plan_.precision.params;
  mp.grad_dtype = plan_.precision.grads;
  mp.compute_dtype = facts_.compute_dtype;
  mp.float_input_numel = facts_.float_input_numel;
  mp.optimizer_bytes_per_element = facts_.optimizer_bytes_per_element;
  mp.training = facts_.training;
  mp.micro_batch = plan_.batch.micro;
  if (facts_.training) {
    const GradReduceOptions r = reduce_options_for(plan_, zero, facts_.device_is_host, facts_.ranks_per_node,
                                                   opt_off.device != OffloadDevice::none ? facts_.host : nullptr);
    mp.reduce_buffer_bytes = GradReducer::buffer_bytes(layout, plan_.precision.grads, r, world);
    mp.reduce_buffer_reason = GradReducer::buffer_reason(layout, plan_.precision.grads, r, world);
  }
  mp.checkpointing = facts_.checkpointing;
  if (zero.parameters_partitioned) {  // gathered groups, plus hpZ's copies (parameters too)
    mp.stage3_live_elements = ParamStore::gathered_bound(layout, s3) + ParamStore::hpz_secondary_bound(layout, s3);
    mp.stage3_live_reason = ParamStore::gathered_reason(layout, s3, dtype_size(plan_.precision.params));
    if (s3.hpz_partition_size > 1) mp.stage3_live_reason += ", and hpZ's secondary copies";
  }
  mp.offload_optimizer = opt_off.device;
  if (opt_off.device != OffloadDevice::none) {
    // As MasterWeights will split them: the first sub-groups offloaded, the rest on the device.
    const OffloadSplit split =
        offload_split(make_sub_groups(layout, zero.parameters_partitioned, zero.sub_group_size), opt_off);
    mp.max_sub_group = split.largest_offloaded;
    mp.offloaded_elements = split.offloaded_elements;
    mp.offload_ratio = opt_off.ratio;
    SwapFootprint f = swap_footprint(opt_off, mp.max_sub_group, split.offloaded, facts_.optimizer_states);
    if (opt_off.device == OffloadDevice::nvme && split.offloaded > 0) {
      mp.swap_pool_bytes = f.pool_bytes;
      mp.swap_file_bytes = f.file_bytes;
    }
  }
  mp.offload_param = offload.device;
  if (offload.device != OffloadDevice::none) {  // placed as ParamHome will place the slices
    const int64_t e = static_cast<int64_t>(dtype_size(plan_.precision.params));
    ParamHome::Placement placed = ParamHome::place(layout, plan_.precision.params, offload);
    mp.param_host_bytes = placed.host_elements * e;
    mp.param_nvme_bytes = placed.nvme_elements * e;
    if (placed.slots > 0)
      mp.param_swap_buffer_bytes =
          offload.buffer_count * offload::round_up(placed.largest_swapped * e, offload::kDirectIoAlignment);
  }
  MemoryPlan p = plan_memory(layers_, layout, mp);
  if (frozen != nullptr) add_frozen(p, *frozen, zero, offload, s3, plan_.precision.params, facts_.compute_dtype);
  return p;
}

int64_t RunMemory::deepspeed_estimate(int64_t numel, const MemorySetting& s) const {
  int64_t largest = 0;
  for (const LayerDecl& l : layers_) {
    int64_t n = 0;
    for (const ParamDecl& p : l.params) n += p.numel;
    largest = std::max(largest, n);
  }
  const double P = static_cast<double>(numel);
  // The GPU column depends only on the total number of GPUs, so (ranks, 1 node) is exact.
  return plan_.zero_at_stage[static_cast<size_t>(s.stage)].parameters_partitioned
             ? estimate_zero3(P, static_cast<double>(largest), s.ranks, 1, s.offload_param, s.offload_optimizer, true)
                   .gpu_bytes
             : estimate_zero2(P, s.ranks, 1, s.offload_optimizer).gpu_bytes;
}

std::string describe_setting(const MemorySetting& s) {
  std::string what = fmt::format("stage {}", s.stage);
  if (s.offload_param)
    what += " with offload_param and offload_optimizer cpu";
  else if (s.offload_optimizer)
    what += " with offload_optimizer cpu";
  return what + fmt::format(" on {} rank{}", s.ranks, s.ranks == 1 ? "" : "s");
}

std::string RunMemory::advice(const MemorySetting& current, int64_t limit) const {
  const int n = current.ranks;
  std::vector<MemorySetting> candidates;
  for (int s = current.stage + 1; s <= 3 && n > 1; ++s)
    candidates.push_back({s, current.offload_optimizer, current.offload_param, n});
  for (int s = std::max(current.stage, 1); s <= 3 && !current.offload_optimizer; ++s)
    candidates.push_back({s, true, false, n});
  if (!current.offload_param) candidates.push_back({3, true, true, n});
  std::vector<std::string> fit, planned;
  for (const MemorySetting& c : candidates) {
    const int64_t total = plan_for(c).total();
    planned.push_back(fmt::format("{} plans {}", describe_setting(c), format_bytes(total)));
    if (limit > 0 && total <= limit && fit.size() < 3)
      fit.push_back(fmt::format("{} ({})", describe_setting(c), format_bytes(total)));
  }
  if (limit <= 0) return planned.empty() ? "" : fmt::format(" Per rank: {}.", fmt::join(planned, "; "));
  if (!fit.empty())
    return fmt::format(" By the same plan, these fit {} per rank: {}.", format_bytes(limit), fmt::join(fit, "; "));
  std::string advice = fmt::format(" No other ZeRO stage or CPU offload fits {} per rank on {} rank{}{}.",
                                   format_bytes(limit), n, n == 1 ? "" : "s",
                                   planned.empty() ? "" : fmt::format(" ({})", fmt::join(planned, "; ")));
  for (int ranks = n * 2; ranks <= 4096; ranks *= 2)
    for (bool offload : {false, true}) {
      const MemorySetting c{3, offload || current.offload_optimizer, offload || current.offload_param, ranks};
      if (const int64_t total = plan_for(c).total(); total <= limit)
        return advice + fmt::format(" More ranks: {} would plan {} each.", describe_setting(c), format_bytes(total));
    }
  return advice;
}

}  // namespace dscpp::runtime
