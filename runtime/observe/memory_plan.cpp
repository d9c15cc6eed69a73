#include "runtime/observe/memory_plan.h"

#include "core/byte_size.h"

#include <fmt/format.h>

#include <algorithm>

namespace dscpp::runtime {

int64_t MemoryPlan::model_states() const {
  return bytes[static_cast<size_t>(MemCategory::params)] + bytes[static_cast<size_t>(MemCategory::grads)] +
         bytes[static_cast<size_t>(MemCategory::optimizer_state)];
}

namespace {
int64_t sum(const std::array<int64_t, kMemCategories>& a) {
  int64_t t = 0;
  for (int64_t b : a) t += b;
  return t;
}
}  // namespace

int64_t MemoryPlan::total() const { return sum(bytes); }
int64_t MemoryPlan::host_total() const { return sum(host); }
int64_t MemoryPlan::nvme_total() const { return sum(nvme); }


int64_t model_state_bytes(int stage, int world, int64_t elements, int64_t elem_bytes, int64_t optimizer_bytes) {
  const ZeroPlan zero = ZeroPlan::for_stage(stage);
  const int64_t per_rank = (elements + world - 1) / world;
  int64_t params = (zero.parameters_partitioned ? per_rank : elements) * elem_bytes;
  int64_t grads = (zero.gradients_partitioned ? per_rank : elements) * elem_bytes;
  int64_t optim = (zero.optimizer_partitioned ? per_rank : elements) * optimizer_bytes;
  return params + grads + optim;
}

MemoryPlan plan_memory(const std::vector<LayerDecl>& layers, const FlatLayout& layout, const MemoryPlanInputs& in) {
  MemoryPlan p;
  p.offload_optimizer = in.offload_optimizer;
  p.offload_ratio = in.offload_ratio;
  p.params_offloaded = in.zero.parameters_partitioned && in.offload_param != OffloadDevice::none;
  auto at = [&p](MemCategory c) -> int64_t& { return p.bytes[static_cast<size_t>(c)]; };
  const int64_t e = static_cast<int64_t>(dtype_size(in.dtype));
  const bool params_off = in.zero.parameters_partitioned && in.offload_param != OffloadDevice::none;
  // Offloaded parameters cannot be their own master (MasterWeights): an fp32 copy on the device.
  const int64_t master = in.dtype == DType::f32 && !params_off ? 0 : 4;
  at(MemCategory::params) = in.zero.parameters_partitioned
                                ? ((params_off ? 0 : layout.part_total) + in.stage3_live_elements) * e
                                : layout.total * e;
  if (in.zero.parameters_partitioned)
    p.items.push_back({MemCategory::params, in.stage3_live_elements * e, in.stage3_live_reason});
  if (params_off) {
    p.host[static_cast<size_t>(MemCategory::params)] = in.param_host_bytes;
    p.nvme[static_cast<size_t>(MemCategory::params)] = in.param_nvme_bytes;
    p.host[static_cast<size_t>(MemCategory::buffers)] = in.param_swap_buffer_bytes;
  }
  const int64_t ge = static_cast<int64_t>(dtype_size(in.grad_dtype));
  at(MemCategory::grads) = in.zero.gradients_partitioned ? layout.part_total * ge : layout.total * ge;
  at(MemCategory::optimizer_state) = layout.part_total * (in.optimizer_bytes_per_element + master);
  int64_t max_ws = 0, max_part = 0;
  for (const LayerDecl& l : layers) max_ws = std::max(max_ws, l.workspace_bytes);
  const int64_t ce = static_cast<int64_t>(dtype_size(in.compute_dtype));
  const ActivationLayout acts = make_activation_layout(layers, in.checkpointing, in.micro_batch, ce);
  at(MemCategory::activations) = acts.device_bytes(in.training);
  p.host[static_cast<size_t>(MemCategory::activations)] = acts.host_bytes();
  for (const PartitionGroup& g : layout.groups) max_part = std::max(max_part, g.part);
  // Every device buffer with what it is for: the plan printed at start lists them.
  int64_t buffers = 0;
  auto buffer = [&](int64_t bytes, std::string what) {
    if (bytes <= 0) return;
    buffers += bytes;
    p.items.push_back({MemCategory::buffers, bytes, std::move(what)});
  };
  buffer(in.micro_batch * max_ws + kGuardBytes,
         fmt::format("layer workspace: the largest layer's {} per sample × micro-batch {}", format_bytes(max_ws),
                     in.micro_batch));
  // A shared parameter's user gets a copy of its values and a gradient of its own (layer_runner.h).
  int64_t tied = 0;
  for (const LayerDecl& l : layers)
    for (const TiedParam& t : l.tied) tied += 2 * t.numel * ce;
  buffer(tied, "shared parameters: each user's copy of the values and its own gradient");
  if (in.compute_dtype != DType::f32)
    buffer(in.micro_batch * in.float_input_numel * ce, "the float data input in the compute dtype");
  if (in.dtype != in.compute_dtype)
    buffer(layout.max_layer_numel * 4, "fp32 compute over 16-bit parameters: the largest layer's parameters in fp32");
  if (!in.training) {  // forward only: the parameters, activations and the buffers above
    at(MemCategory::grads) = at(MemCategory::optimizer_state) = 0;
    at(MemCategory::buffers) = buffers;
    return p;
  }
  buffer(in.reduce_buffer_bytes, in.reduce_buffer_reason);
  if (in.grad_dtype != in.compute_dtype)
    buffer(layout.max_layer_numel * ce, "the largest layer's gradients in the compute dtype, before they join storage");
  if (ge != 4) buffer(max_part * 4, "the optimizer step's fp32 gradient of one group");
  at(MemCategory::buffers) = buffers;
  if (in.offload_optimizer != OffloadDevice::none) {
    auto off = [&p](MemCategory c) -> int64_t& { return p.host[static_cast<size_t>(c)]; };
    const auto optim = static_cast<size_t>(MemCategory::optimizer_state);
    // Offloaded, the master is always its own fp32 copy, even for fp32 parameters — also for
    // the sub-groups a partial offload keeps on the device.
    const int64_t per_element = in.optimizer_bytes_per_element + 4;
    const int64_t offloaded = in.offloaded_elements, resident = layout.part_total - in.offloaded_elements;
    p.bytes[optim] = resident * per_element;
    if (in.offload_optimizer == OffloadDevice::cpu) {
      p.host[optim] = offloaded * per_element;
    } else {
      p.host[optim] = in.swap_pool_bytes;
      p.nvme[optim] = in.swap_file_bytes;
    }
    if (in.zero.gradients_partitioned) {
      off(MemCategory::grads) = offloaded * ge;
      at(MemCategory::grads) = resident * ge;
    }
    // The offloaded sub-group's fp32 gradient moves to the host; so does the step's 16-bit
    // staging. The device keeps its unscaled-gradient buffer while sub-groups step there.
    if (ge != 4 && resident == 0) {
      at(MemCategory::buffers) -= max_part * 4;
      p.items.pop_back();  // the fp32 gradient's, added last
    }
    if (offloaded > 0) off(MemCategory::buffers) += in.max_sub_group * (4 + (e != 4 ? e : 0));
  }
  return p;
}

std::string format_memory_plan(const MemoryPlan& plan, const MemoryStats* measured, int64_t deepspeed_estimate,
                               const MemoryStats* host_measured) {
  const bool off = plan.offloaded();
  auto cell = [](int64_t b) { return fmt::format(" {:>12}", format_bytes(b)); };
  auto peak = [](const MemoryStats* m, size_t c) { return fmt::format(" {:>14}", format_bytes(m->peak[c])); };
  std::string out = fmt::format("{:<16} {:>12}{}", "per rank", off ? "device plan" : "planned",
                                measured ? fmt::format(" {:>14}", off ? "device peak" : "measured peak") : "");
  if (off)
    out += fmt::format(" {:>12}{} {:>12}", "host plan", host_measured ? fmt::format(" {:>14}", "host peak") : "",
                       "NVMe plan");
  for (size_t c = 0; c < kMemCategories; ++c) {
    out += fmt::format("\n{:<16}", mem_category_name(static_cast<MemCategory>(c))) + cell(plan.bytes[c]);
    if (measured) out += peak(measured, c);
    if (off) out += cell(plan.host[c]) + (host_measured ? peak(host_measured, c) : "") + cell(plan.nvme[c]);
  }
  out += fmt::format("\n{:<16}", "model states") + cell(plan.model_states());
  if (measured)
    out += fmt::format(" {:>14}", format_bytes(measured->peak[static_cast<size_t>(MemCategory::params)] +
                                                measured->peak[static_cast<size_t>(MemCategory::grads)] +
                                                measured->peak[static_cast<size_t>(MemCategory::optimizer_state)]));
  out += fmt::format("\n{:<16}", "total") + cell(plan.total());
  if (measured) out += fmt::format(" {:>14}", format_bytes(measured->total_peak));
  if (off)
    out += cell(plan.host_total()) +
           (host_measured ? fmt::format(" {:>14}", format_bytes(host_measured->total_peak)) : "") +
           cell(plan.nvme_total());
  else
    out += "\npinned host, host, NVMe: none (no offload configured: every row above is device memory)";
  if (!measured)
    for (const PlanItem& i : plan.items)
      out += fmt::format("\n  {:<14}{} {}", mem_category_name(i.category), cell(i.bytes), i.what);
  if (deepspeed_estimate > 0) {
    // DeepSpeed's table has no row for parameters offloaded alone: it prices them as no offload.
    const bool optim = plan.offload_optimizer != OffloadDevice::none;
    const char* what = optim && plan.params_offloaded ? "parameters and optimizer offloaded"
                       : optim                        ? "optimizer offloaded"
                       : plan.params_offloaded        ? "its row for no offload: it has none for parameters alone"
                                                      : "no offload";
    // Nor has it one for partial optimizer offload: it prices the whole optimizer offloaded.
    const std::string partial =
        optim && plan.offload_ratio < 1.0
            ? fmt::format(" — its row for full offload, while ratio {} keeps part of it on the device",
                          plan.offload_ratio)
            : "";
    out += fmt::format("\nDeepSpeed's estimator (fp16 model states per GPU, {}{}): {}", what, partial,
                       format_bytes(deepspeed_estimate));
  }
  return out;
}

}  // namespace dscpp::runtime
