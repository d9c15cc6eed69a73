#include "runtime/memory_plan.h"

#include "runtime/train_log.h"

#include <fmt/format.h>

#include <algorithm>

namespace dscpp::runtime {

int64_t MemoryPlan::model_states() const {
  return bytes[static_cast<size_t>(MemCategory::params)] + bytes[static_cast<size_t>(MemCategory::grads)] +
         bytes[static_cast<size_t>(MemCategory::optimizer_state)];
}

int64_t MemoryPlan::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

int64_t model_state_bytes(int stage, int world, int64_t elements, int64_t elem_bytes, int64_t optimizer_bytes) {
  const int64_t per_rank = (elements + world - 1) / world;
  int64_t params = stage == 3 ? per_rank * elem_bytes : elements * elem_bytes;
  int64_t grads = stage >= 2 ? per_rank * elem_bytes : elements * elem_bytes;
  int64_t optim = (stage >= 1 ? per_rank : elements) * optimizer_bytes;
  return params + grads + optim;
}

MemoryPlan plan_memory(const std::vector<LayerDecl>& layers, const FlatLayout& layout, const MemoryPlanInputs& in) {
  MemoryPlan p;
  auto at = [&p](MemCategory c) -> int64_t& { return p.bytes[static_cast<size_t>(c)]; };
  const int64_t e = static_cast<int64_t>(dtype_size(in.dtype));
  const int64_t master = in.dtype == DType::f32 ? 0 : 4;
  const int64_t owned_on_device = in.params_offloaded ? 0 : layout.part_total;
  at(MemCategory::params) = in.stage == 3 ? (owned_on_device + in.stage3_live_elements) * e
                                          : layout.total * e;
  const int64_t ge = static_cast<int64_t>(dtype_size(in.grad_dtype));
  if (in.training) {
    at(MemCategory::grads) = in.stage >= 2 ? layout.part_total * ge : layout.total * ge;
    // Offloaded fp32 parameters cannot be their own master (MasterWeights).
    const int64_t master_bytes = in.params_offloaded ? 4 : master;
    at(MemCategory::optimizer_state) = layout.part_total * (in.optimizer_bytes_per_element + master_bytes);
  }
  int64_t max_out = 0, max_ws = 0, acts = 0, max_part = 0;
  for (const LayerDecl& l : layers) {
    acts += in.micro_batch * (l.output_numel * 4 + l.saved_bytes);
    max_out = std::max(max_out, l.output_numel);
    max_ws = std::max(max_ws, l.workspace_bytes);
  }
  at(MemCategory::activations) = acts + (in.training ? 2 * in.micro_batch * max_out * 4 : 0);  // + the two backward gradient buffers
  for (const PartitionGroup& g : layout.groups) max_part = std::max(max_part, g.part);
  int64_t buffers = in.micro_batch * max_ws;
  if (!in.training) {
    if (e != 4) buffers += layout.max_layer_numel * 4;
    at(MemCategory::buffers) = buffers;
    return p;
  }
  if (in.stage == 1) buffers += 2 * max_part * ge;
  if (in.stage >= 2) buffers += (in.overlap_comm ? 2 : 1) * (layout.max_group_numel + max_part) * ge;
  if (e != 4) buffers += layout.max_layer_numel * 4;                 // fp32 view of a layer's parameters
  if (ge != 4) buffers += layout.max_layer_numel * 4 + max_part * 4;  // fp32 layer gradients, unscaled gradient
  at(MemCategory::buffers) = buffers;
  return p;
}

std::string format_memory_plan(const MemoryPlan& plan, const MemoryStats* measured, int64_t deepspeed_estimate) {
  std::string out = fmt::format("{:<16} {:>12}{}", "per rank", "planned", measured ? fmt::format(" {:>14}", "measured peak") : "");
  for (size_t c = 0; c < kMemCategories; ++c) {
    out += fmt::format("\n{:<16} {:>12}", mem_category_name(static_cast<MemCategory>(c)), format_bytes(plan.bytes[c]));
    if (measured) out += fmt::format(" {:>14}", format_bytes(measured->peak[c]));
  }
  out += fmt::format("\n{:<16} {:>12}", "model states", format_bytes(plan.model_states()));
  if (measured)
    out += fmt::format(" {:>14}", format_bytes(measured->peak[static_cast<size_t>(MemCategory::params)] +
                                                measured->peak[static_cast<size_t>(MemCategory::grads)] +
                                                measured->peak[static_cast<size_t>(MemCategory::optimizer_state)]));
  out += fmt::format("\n{:<16} {:>12}", "total", format_bytes(plan.total()));
  if (measured) out += fmt::format(" {:>14}", format_bytes(measured->total_peak));
  if (plan.host_params + plan.nvme_params + plan.host_buffers == 0)
    out += "\npinned host, host, NVMe: none (no offload configured: every row above is device memory)";
  else
    out += fmt::format("\noff the device (offload_param): parameters {} in host memory, {} on NVMe, swap buffers {}",
                       format_bytes(plan.host_params), format_bytes(plan.nvme_params), format_bytes(plan.host_buffers));
  if (deepspeed_estimate > 0)
    out += fmt::format("\nDeepSpeed's estimator (fp16 model states per GPU, no offload): {}", format_bytes(deepspeed_estimate));
  return out;
}

}  // namespace dscpp::runtime
