// The per-rank memory plan: what the engine will allocate, by category, derived before
// allocating from the plugin's declarations, the flat layout and the config — and the report
// that puts the measured peaks beside it.
//
// Model states follow the ZeRO paper's terms for the storage dtype (e bytes per element:
// 4 for fp32, 2 for fp16/bf16, for gradients their accumulation dtype's size; Ψ = padded
// parameter elements, N = ranks, K = optimizer bytes per element, which includes the fp32
// master when parameters are 16-bit):
//   stage 0   params eΨ      grads eΨ      optimizer KΨ
//   stage 1   params eΨ      grads eΨ      optimizer KΨ/N
//   stage 2   params eΨ      grads eΨ/N    optimizer KΨ/N
//   stage 3   params eΨ/N + gathered layers   grads eΨ/N   optimizer KΨ/N
// Bounded extras: stage-3 gathered groups (current layer, prefetch window, reuse and persistent
// groups), reduction buffers (two groups' staging at stages 2–3, two slices at stage 1), the
// fp32 views of one layer for 16-bit storage, activations of one micro-batch per layer.
#pragma once

#include "core/device.h"
#include "core/dtype.h"
#include "runtime/flat_layout.h"
#include "runtime/plugin.h"

#include <array>
#include <string>

namespace dscpp::runtime {

struct MemoryPlanInputs {
  int stage = 0;
  int world = 1;
  DType dtype = DType::f32;       // parameters
  DType grad_dtype = DType::f32;  // gradients
  int64_t optimizer_bytes_per_element = 8;  // state only (Adam: m and v); the master is added for 16-bit
  int64_t micro_batch = 1;
  bool overlap_comm = false;
  int64_t stage3_live_elements = 0;  // bound on gathered stage-3 elements (ParamStore's policy)
  // offload_param: the owned slices live off the device (ParamHome); the device holds the
  // gathered groups (an offloaded slice is copied straight into its gather) and an fp32 master.
  bool params_offloaded = false;
  bool training = true;  // false: --eval_only (no gradients, no optimizer state, no backward buffers)
};

struct MemoryPlan {
  std::array<int64_t, kMemCategories> bytes{};  // device
  // Off the device (filled in once ParamHome has placed the slices): offloaded parameters in
  // host memory and on NVMe, and the host buffers NVMe slices move through.
  int64_t host_params = 0, nvme_params = 0, host_buffers = 0;
  int64_t model_states() const;  // params + grads + optimizer state
  int64_t total() const;
};

MemoryPlan plan_memory(const std::vector<LayerDecl>& layers, const FlatLayout& layout, const MemoryPlanInputs& in);

// "category | planned | measured peak" rows (measured may be null: before the first step), plus
// the model-state total and DeepSpeed's estimate for comparison when given (> 0).
std::string format_memory_plan(const MemoryPlan& plan, const MemoryStats* measured, int64_t deepspeed_estimate);

// Model-state bytes per rank at a stage with the terms above (no bounded extras), for advice
// such as "stage 3 would need ...".
int64_t model_state_bytes(int stage, int world, int64_t elements, int64_t elem_bytes, int64_t optimizer_bytes);

}  // namespace dscpp::runtime
