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
// fp32 views of one layer for 16-bit storage, activations of one micro-batch as
// runtime/model/activation_layout.h lays them out (device, and host with cpu_checkpointing).
//
// Each category is planned in three places: the training device, host memory and NVMe (swap
// files). offload_optimizer cpu moves the optimizer row (K = state + an fp32 master, always
// separate) to the host, and at stages 2–3 the gradient partition too, plus the fp32 gradient
// and 16-bit staging of one optimizer sub-group; nvme keeps only buffer_count swap buffers of
// that row on the host and puts the rest in the swap file. With ratio < 1 (stage 3) that holds
// for the offloaded sub-groups' elements only; the others keep optimizer row and gradients on
// the device, with the master still a separate copy. offload_param (stage 3) moves the
// owned parameter slices to the host or NVMe (as ParamHome places them: param_host_bytes and
// param_nvme_bytes, plus its swap buffers on the host); the device keeps the gathered layers
// and, without offload_optimizer, an fp32 master even for fp32 parameters. --eval_only plans
// no gradients, no optimizer state and no backward buffers.
#pragma once

#include "core/dtype.h"
#include "device/device.h"
#include "runtime/model/activation_layout.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"
#include "runtime/plans.h"

#include <array>
#include <string>
#include <vector>

namespace dscpp::runtime {


struct MemoryPlanInputs {
  ZeroPlan zero;
  int world = 1;
  DType dtype = DType::f32;       // parameters
  DType grad_dtype = DType::f32;  // gradients
  DType compute_dtype = DType::f32;  // the ops table's: activations, and what layers read and write
  int64_t float_input_numel = 0;     // per sample, when the data input is float (cast to a 16-bit compute dtype)
  int64_t optimizer_bytes_per_element = 8;  // state only (Adam: m and v); the master is added for 16-bit
  int64_t micro_batch = 1;
  int64_t reduce_buffer_bytes = 0;  // the gradient reducer's staging (GradReducer::buffer_bytes)
  std::string reduce_buffer_reason;  // and what it is (GradReducer::buffer_reason)
  int64_t stage3_live_elements = 0;  // bound on gathered stage-3 elements (ParamStore's policy)
  std::string stage3_live_reason;    // and which settings make it
  OffloadDevice offload_optimizer = OffloadDevice::none;
  int64_t max_sub_group = 0;  // elements of the largest offloaded optimizer sub-group (host scratch)
  // Partition elements whose optimizer (and at stages 2–3 gradient) is offloaded: all of them
  // unless offload_optimizer ratio < 1 keeps the last sub-groups on the device (stage 3).
  int64_t offloaded_elements = 0;
  double offload_ratio = 1.0;   // as configured, for the estimator's label
  int64_t swap_pool_bytes = 0;  // nvme: host buffers the optimizer state is swapped through
  int64_t swap_file_bytes = 0;  // nvme: the optimizer swap file
  OffloadDevice offload_param = OffloadDevice::none;
  int64_t param_host_bytes = 0, param_nvme_bytes = 0, param_swap_buffer_bytes = 0;
  bool training = true;  // false: --eval_only
  CheckpointingOptions checkpointing;  // activations as ActivationLayout places them (device and host)
};

// One device allocation the plan counts, with what it is and which settings size it.
struct PlanItem {
  MemCategory category;
  int64_t bytes;
  std::string what;
};

struct MemoryPlan {
  std::array<int64_t, kMemCategories> bytes{};  // the training device
  std::vector<PlanItem> items;                  // the buffers, and stage 3's gathered parameters
  std::array<int64_t, kMemCategories> host{};   // host memory (offload)
  std::array<int64_t, kMemCategories> nvme{};   // swap files (offload device nvme)
  int64_t model_states() const;  // params + grads + optimizer state, on the device
  int64_t total() const;         // on the device
  int64_t host_total() const;
  int64_t nvme_total() const;
  bool offloaded() const { return host_total() + nvme_total() > 0; }
  OffloadDevice offload_optimizer = OffloadDevice::none;  // as configured, for the estimator's label
  double offload_ratio = 1.0;                             // likewise
  bool params_offloaded = false;                          // offload_param at stage 3
};

MemoryPlan plan_memory(const std::vector<LayerDecl>& layers, const FlatLayout& layout, const MemoryPlanInputs& in);

// "category | planned | measured peak" rows for the device (measured may be null: before the
// first step), host and NVMe columns when anything is offloaded (host_measured: the host
// device's peaks, may be null), the model-state total and DeepSpeed's estimate when given (> 0).
std::string format_memory_plan(const MemoryPlan& plan, const MemoryStats* measured, int64_t deepspeed_estimate,
                               const MemoryStats* host_measured = nullptr);

// Model-state bytes per rank at a stage with the terms above (no bounded extras), for advice
// such as "stage 3 would need ...".
int64_t model_state_bytes(int stage, int world, int64_t elements, int64_t elem_bytes, int64_t optimizer_bytes);

}  // namespace dscpp::runtime
