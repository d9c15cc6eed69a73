// The engine's memory accounting: the plan made before anything is allocated, the measured
// peaks beside it, and what to say when the device runs out.
#include "runtime/train/engine.h"

#include "core/log.h"
#include "core/zero_estimate.h"
#include "offload/aligned_buffer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

namespace dscpp::runtime {

MemoryPlan Engine::make_memory_plan() const {
  return plan_with(layout_, plan_.zero, offload_, plan_.param_offload, world_.size());
}

MemoryPlan Engine::plan_for(const MemorySetting& s) const {
  const ZeroPlan& zero = plan_.zero_at_stage[static_cast<size_t>(s.stage)];
  const OptimizerOffloadPlan none_optimizer;
  const ParamOffloadPlan none_param;
  return plan_with(make_flat_layout(plugin_.layers(), grouping_for(zero, s.ranks)), zero,
                   !s.offload_optimizer                   ? none_optimizer
                   : offload_.device == OffloadDevice::cpu ? offload_
                                                           : plan_.cpu_optimizer_offload,
                   s.offload_param ? plan_.cpu_param_offload : none_param, s.ranks);
}

MemoryPlan Engine::plan_with(const FlatLayout& layout, const ZeroPlan& zero, const OptimizerOffloadPlan& opt_off,
                             const ParamOffloadPlan& offload, int world) const {
  const Stage3Plan& s3 = plan_.stage3;
  MemoryPlanInputs mp;
  mp.zero = zero;
  mp.world = world;
  mp.dtype = plan_.precision.params;
  mp.grad_dtype = plan_.precision.grads;
  mp.compute_dtype = dtype_of(ops_.dtype);
  if (plugin_.data().input_dtype == DSCPP_F32) mp.float_input_numel = plugin_.data().input_numel;
  mp.optimizer_bytes_per_element = optimizer_ ? optimizer_->state_bytes_per_element() : 0;
  mp.training = !options_.eval_only;
  mp.micro_batch = plan_.batch.micro;
  if (!options_.eval_only) {
    const GradReduceOptions r = reduce_options(zero, opt_off.device != OffloadDevice::none);
    mp.reduce_buffer_bytes = GradReducer::buffer_bytes(layout, plan_.precision.grads, r, world);
    mp.reduce_buffer_reason = GradReducer::buffer_reason(layout, plan_.precision.grads, r, world);
  }
  mp.checkpointing = ckpt_;
  if (zero.parameters_partitioned) {  // gathered groups, plus hpZ's copies (parameters too)
    mp.stage3_live_elements = ParamStore::gathered_bound(layout, s3) + ParamStore::hpz_secondary_bound(layout, s3);
    mp.stage3_live_reason = ParamStore::gathered_reason(layout, s3, dtype_size(plan_.precision.params));
    if (s3.hpz_partition_size > 1) mp.stage3_live_reason += ", and hpZ's secondary copies";
  }
  mp.offload_optimizer = opt_off.device;
  if (opt_off.device != OffloadDevice::none) {
    // As MasterWeights will split them: the first sub-groups offloaded, the rest on the device.
    const OffloadSplit split = offload_split(
        make_sub_groups(layout, zero.parameters_partitioned, zero.sub_group_size), opt_off);
    mp.max_sub_group = split.largest_offloaded;
    mp.offloaded_elements = split.offloaded_elements;
    mp.offload_ratio = opt_off.ratio;
    SwapFootprint f = swap_footprint(opt_off, mp.max_sub_group, split.offloaded,
                                     static_cast<int64_t>(optimizer_->state_names().size()));
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
  return plan_memory(plugin_.layers(), layout, mp);
}

int64_t Engine::deepspeed_estimate() const {
  int64_t largest = 0;
  for (const LayerDecl& l : plugin_.layers()) {
    int64_t n = 0;
    for (const ParamDecl& p : l.params) n += p.numel;
    largest = std::max(largest, n);
  }
  double P = static_cast<double>(layout_.numel);
  // The GPU column depends only on the total number of GPUs, so (world, 1 node) is exact.
  const bool off = offload_.device != OffloadDevice::none,
             off_params = plan_.param_offload.device != OffloadDevice::none;
  return plan_.zero.parameters_partitioned
             ? estimate_zero3(P, static_cast<double>(largest), world_.size(), 1, off_params, off, true).gpu_bytes
             : estimate_zero2(P, world_.size(), 1, off).gpu_bytes;
}

namespace {
std::string describe(const Engine::MemorySetting& s) {
  std::string what = fmt::format("stage {}", s.stage);
  if (s.offload_param) what += " with offload_param and offload_optimizer cpu";
  else if (s.offload_optimizer) what += " with offload_optimizer cpu";
  return what + fmt::format(" on {} rank{}", s.ranks, s.ranks == 1 ? "" : "s");
}
}  // namespace

void Engine::out_of_memory(const OutOfDeviceMemory& e) {
  if (options_.eval_only) eval_out_of_memory(e);
  // Other settings, planned exactly as a run with them would plan (the same zero_optimization
  // at another stage, CPU offload as {"device": "cpu"} gives it), smallest change first. Only
  // what the plan says fits under the limit is suggested.
  const int n = world_.size();
  const int64_t limit = device_.stats().limit;
  const bool off_opt = offload_.device != OffloadDevice::none;
  const bool off_param = plan_.param_offload.device != OffloadDevice::none;
  std::vector<MemorySetting> candidates;
  for (int s = plan_.zero.stage + 1; s <= 3 && n > 1; ++s) candidates.push_back({s, off_opt, off_param, n});
  for (int s = std::max(plan_.zero.stage, 1); s <= 3 && !off_opt; ++s) candidates.push_back({s, true, false, n});
  if (!off_param) candidates.push_back({3, true, true, n});
  std::vector<std::string> fit, planned;
  for (const MemorySetting& c : candidates) {
    const int64_t total = plan_for(c).total();
    planned.push_back(fmt::format("{} plans {}", describe(c), format_bytes(total)));
    if (limit > 0 && total <= limit && fit.size() < 3)
      fit.push_back(fmt::format("{} ({})", describe(c), format_bytes(total)));
  }
  std::string advice;
  if (limit <= 0)
    advice = planned.empty() ? "" : fmt::format(" Per rank: {}.", fmt::join(planned, "; "));
  else if (!fit.empty())
    advice = fmt::format(" By the same plan, these fit {} per rank: {}.", format_bytes(limit), fmt::join(fit, "; "));
  else {
    advice = fmt::format(" No other ZeRO stage or CPU offload fits {} per rank on {} rank{}{}.", format_bytes(limit), n,
                         n == 1 ? "" : "s", planned.empty() ? "" : fmt::format(" ({})", fmt::join(planned, "; ")));
    for (int ranks = n * 2; ranks <= 4096; ranks *= 2)
      for (bool offload : {false, true}) {
        const MemorySetting c{3, offload || off_opt, offload || off_param, ranks};
        if (const int64_t total = plan_for(c).total(); total <= limit) {
          advice += fmt::format(" More ranks: {} would plan {} each.", describe(c), format_bytes(total));
          ranks = 4096;
          break;
        }
      }
  }
  const int64_t other = memory_plan_.total() - memory_plan_.model_states();  // activations and buffers
  fail(
      "{}\nAt ZeRO stage {} on {} rank{} this rank plans {}: {} of model states, {} of activations and buffers for "
      "micro-batch {}.{} Or lower train_micro_batch_size_per_gpu.",
      e.what(), plan_.zero.stage, n, n == 1 ? "" : "s", format_bytes(memory_plan_.total()),
      format_bytes(memory_plan_.model_states()), format_bytes(other), plan_.batch.micro, advice);
}

void Engine::log_memory_peaks() {
  if (world_.rank() != 0) return;
  MemoryStats m = device_.stats();
  std::string peaks;
  for (size_t c = 0; c < kMemCategories; ++c) {
    std::string key = mem_category_name(static_cast<MemCategory>(c));
    std::replace(key.begin(), key.end(), ' ', '_');
    peaks += fmt::format("{}={}, ", key, m.peak[c]);
  }
  log::info("memory peak per rank (bytes): {}total={}; planned model states={}, planned total={}, DeepSpeed's "
            "estimate={}",
            peaks, m.total_peak, memory_plan_.model_states(), memory_plan_.total(), deepspeed_estimate());
  if (memory_plan_.offloaded()) {
    MemoryStats h = host_stats();
    std::string host;
    for (size_t c = 0; c < kMemCategories; ++c) {
      std::string key = mem_category_name(static_cast<MemCategory>(c));
      std::replace(key.begin(), key.end(), ' ', '_');
      host += fmt::format("{}={}/{}, ", key, h.peak[c], memory_plan_.host[c]);
    }
    log::info("host memory peak per rank (bytes, measured/planned): {}total={}/{}; NVMe planned={}", host,
              h.total_peak, memory_plan_.host_total(), memory_plan_.nvme_total());
  }
  if (offload_.device != OffloadDevice::none) {
    // Where the optimizer state went: with ratio < 1 the device keeps the resident sub-groups'.
    const auto o = static_cast<size_t>(MemCategory::optimizer_state);
    const OffloadSplit& split = master_->split();
    log::info(
        "optimizer state per rank (bytes, measured/planned): device={}/{}, host={}/{}, nvme planned={}; {} of "
        "{} sub-groups offloaded",
        m.peak[o], memory_plan_.bytes[o], host_stats().peak[o], memory_plan_.host[o], memory_plan_.nvme[o],
        split.offloaded, split.offloaded + split.resident);
  }
  if (!params_->home().all_on_device())
    log::info("parameters off the device per rank (bytes): host={}, nvme={}, swap_buffers={}; planned device "
              "params={}",
              params_->home().host_bytes(), params_->home().nvme_bytes(), params_->home().swap_buffer_bytes(),
              memory_plan_.bytes[static_cast<size_t>(MemCategory::params)]);
}

MemoryStats Engine::host_stats() const {
  MemoryStats h = host_->stats();
  const auto pool = master_ ? master_->swap_pool_bytes() : 0;  // allocated once, before training
  h.peak[static_cast<size_t>(MemCategory::optimizer_state)] += pool;
  const int64_t param_pool = params_ ? params_->home().swap_buffer_bytes() : 0;  // offload_param nvme, likewise
  h.peak[static_cast<size_t>(MemCategory::buffers)] += param_pool;
  h.total_peak += pool + param_pool;
  return h;
}

}  // namespace dscpp::runtime
