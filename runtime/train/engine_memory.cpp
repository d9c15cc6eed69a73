// The engine's memory accounting: the plan made before anything is allocated, the measured
// peaks beside it, and what to say when the device runs out.
#include "runtime/train/engine.h"

#include "core/log.h"
#include "core/zero_estimate.h"
#include "offload/aligned_buffer.h"

#include <fmt/format.h>

#include <algorithm>

namespace dscpp::runtime {

MemoryPlan Engine::make_memory_plan() const {
  const Stage3Plan& s3 = plan_.stage3;
  const ParamOffloadPlan& offload = plan_.param_offload;
  MemoryPlanInputs mp;
  mp.zero = plan_.zero;
  mp.world = world_.size();
  mp.dtype = plan_.precision.params;
  mp.grad_dtype = plan_.precision.grads;
  mp.compute_dtype = dtype_of(ops_.dtype);
  if (plugin_.data().input_dtype == DSCPP_F32) mp.float_input_numel = plugin_.data().input_numel;
  mp.optimizer_bytes_per_element = optimizer_ ? optimizer_->state_bytes_per_element() : 0;
  mp.training = !options_.eval_only;
  mp.micro_batch = plan_.batch.micro;
  mp.overlap_comm = plan_.zero.overlap_comm;
  mp.checkpointing = ckpt_;
  if (plan_.zero.parameters_partitioned)  // gathered groups, plus hpZ's copies (parameters too)
    mp.stage3_live_elements = ParamStore::gathered_bound(layout_, s3) + ParamStore::hpz_secondary_bound(layout_, s3);
  mp.offload_optimizer = offload_.device;
  if (offload_.device != OffloadDevice::none) {
    // As MasterWeights will split them: the first sub-groups offloaded, the rest on the device.
    const OffloadSplit split = offload_split(
        make_sub_groups(layout_, plan_.zero.parameters_partitioned, plan_.zero.sub_group_size),
        offload_);
    mp.max_sub_group = split.largest_offloaded;
    mp.offloaded_elements = split.offloaded_elements;
    mp.offload_ratio = offload_.ratio;
    SwapFootprint f = swap_footprint(offload_, mp.max_sub_group, split.offloaded,
                                     static_cast<int64_t>(optimizer_->state_names().size()));
    if (offload_.device == OffloadDevice::nvme && split.offloaded > 0) {
      mp.swap_pool_bytes = f.pool_bytes;
      mp.swap_file_bytes = f.file_bytes;
    }
  }
  mp.offload_param = offload.device;
  if (offload.device != OffloadDevice::none) {  // placed as ParamHome will place the slices
    const int64_t e = static_cast<int64_t>(dtype_size(plan_.precision.params));
    ParamHome::Placement placed = ParamHome::place(layout_, plan_.precision.params, offload);
    mp.param_host_bytes = placed.host_elements * e;
    mp.param_nvme_bytes = placed.nvme_elements * e;
    if (placed.slots > 0)
      mp.param_swap_buffer_bytes =
          offload.buffer_count * offload::round_up(placed.largest_swapped * e, offload::kDirectIoAlignment);
  }
  return plan_memory(plugin_.layers(), layout_, mp);
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

void Engine::out_of_memory(const OutOfDeviceMemory& e) {
  if (options_.eval_only) eval_out_of_memory(e);
  // What each stage would hold for this model, so the user can pick one that fits.
  const int64_t elem = static_cast<int64_t>(dtype_size(plan_.precision.params));
  const int64_t optim =
      (optimizer_ ? optimizer_->state_bytes_per_element() : 0) + (plan_.precision.params == DType::f32 ? 0 : 4);
  const int64_t other = memory_plan_.total() - memory_plan_.model_states();  // activations and buffers
  const int64_t limit = device_.stats().limit;
  auto states = [&](int stage, int ranks) { return model_state_bytes(stage, ranks, layout_.total, elem, optim); };
  std::string options;
  for (int s = plan_.zero.stage + 1; s <= 3 && world_.size() > 1; ++s)
    options += fmt::format("{}stage {}: {}", options.empty() ? "" : ", ", s, format_bytes(states(s, world_.size())));
  std::string ranks_needed;
  if (limit > 0)
    for (int n = world_.size() + 1; n <= 4096; n *= 2)
      if (states(3, n) + other <= limit) {
        ranks_needed = fmt::format(" At stage 3, {} ranks would hold {} each (with {} of activations and buffers).", n,
                                   format_bytes(states(3, n)), format_bytes(other));
        break;
      }
  fail(
      "{}\nAt ZeRO stage {} on {} rank{} this rank holds {} of model states; planned in all: {} ({} of it "
      "activations and buffers for micro-batch {}).{}{} Or offload (zero_optimization.offload_optimizer / "
      "offload_param), or lower train_micro_batch_size_per_gpu.",
      e.what(), plan_.zero.stage, world_.size(), world_.size() == 1 ? "" : "s",
      format_bytes(memory_plan_.model_states()), format_bytes(memory_plan_.total()), format_bytes(other),
      plan_.batch.micro,
      options.empty() ? (world_.size() == 1 ? " With one rank ZeRO has nothing to partition across: add ranks." : "")
                      : fmt::format(" Model states per rank at higher stages: {}.", options),
      ranks_needed);
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
  log::info("memory peak per rank (bytes): {}total={}; planned model states={}, DeepSpeed's estimate={}", peaks,
            m.total_peak, memory_plan_.model_states(), deepspeed_estimate());
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
