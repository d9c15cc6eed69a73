// The engine's memory accounting: the plan made before anything is allocated, the measured
// peaks beside it, and what to say when the device runs out.
#include "runtime/train/engine.h"

#include "core/log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

namespace dscpp::runtime {

RunMemoryFacts Engine::memory_facts(const dscpp_ops& ops) const {
  RunMemoryFacts f;
  f.compute_dtype = dtype_of(ops.dtype);
  if (plugin_.data().input_dtype == DSCPP_F32) f.float_input_numel = plugin_.data().input_numel;
  if (zero_.optimizer) {
    f.optimizer_bytes_per_element = zero_.optimizer->state_bytes_per_element();
    f.optimizer_states = static_cast<int64_t>(zero_.optimizer->state_names().size());
  }
  f.training = !options_.eval_only;
  f.checkpointing = checkpointing_options(plan_.activation_checkpointing, plan_.file_name,
                                          static_cast<int>(plugin_.layers().size()));
  f.device_is_host = device_.is_host();
  f.host = host_;
  f.ranks_per_node = options_.ranks_per_node;
  return f;
}

int64_t Engine::deepspeed_estimate() const {
  return memory_->deepspeed_estimate(zero_.layout.numel + zero_.frozen_layout.numel, memory_->setting(world_.size()));
}

void Engine::out_of_memory(const OutOfDeviceMemory& e) {
  if (options_.eval_only) eval_out_of_memory(e);
  const RunMemory& m = *memory_;
  const int n = world_.size();
  const int64_t other = memory_plan_.total() - memory_plan_.model_states();  // activations and buffers
  fail(
      "{}\nAt ZeRO stage {} on {} rank{} this rank plans {}: {} of model states, {} of activations and buffers for "
      "micro-batch {}.{} Or lower train_micro_batch_size_per_gpu.",
      e.what(), plan_.zero.stage, n, n == 1 ? "" : "s", format_bytes(memory_plan_.total()),
      format_bytes(memory_plan_.model_states()), format_bytes(other), plan_.batch.micro,
      m.advice(m.setting(n), device_.stats().limit));
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
  if (zero_.master && plan_.optimizer_offload.device != OffloadDevice::none) {
    // Where the optimizer state went: with ratio < 1 the device keeps the resident sub-groups'.
    const auto o = static_cast<size_t>(MemCategory::optimizer_state);
    const OffloadSplit& split = zero_.master->split();
    log::info(
        "optimizer state per rank (bytes, measured/planned): device={}/{}, host={}/{}, nvme planned={}; {} of "
        "{} sub-groups offloaded",
        m.peak[o], memory_plan_.bytes[o], host_stats().peak[o], memory_plan_.host[o], memory_plan_.nvme[o],
        split.offloaded, split.offloaded + split.resident);
  }
  if (!zero_.params->home().all_on_device())
    log::info(
        "parameters off the device per rank (bytes): host={}, nvme={}, swap_buffers={}; planned device "
        "params={}",
        zero_.params->home().host_bytes(), zero_.params->home().nvme_bytes(), zero_.params->home().swap_buffer_bytes(),
        memory_plan_.bytes[static_cast<size_t>(MemCategory::params)]);
}

MemoryStats Engine::host_stats() const {
  MemoryStats h = host_->stats();
  const auto pool = zero_.master ? zero_.master->swap_pool_bytes() : 0;  // allocated once, before training
  h.peak[static_cast<size_t>(MemCategory::optimizer_state)] += pool;
  const int64_t param_pool =
      zero_.params ? zero_.params->home().swap_buffer_bytes() : 0;  // offload_param nvme, likewise
  h.peak[static_cast<size_t>(MemCategory::buffers)] += param_pool;
  h.total_peak += pool + param_pool;
  return h;
}

}  // namespace dscpp::runtime
