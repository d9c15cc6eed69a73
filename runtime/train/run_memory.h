// The memory a run plans before it allocates anything: for its own settings (the start-up plan,
// and the measured peaks set beside it), for other ZeRO stages, offloads and rank counts (the
// advice an out-of-memory error gives), and DeepSpeed's estimate for comparison. Everything is
// computed from the TrainPlan and a flat layout, exactly as the run's parts will size
// themselves, so it needs no Engine and is tested without one.
#pragma once

#include "core/dtype.h"
#include "device/device.h"
#include "runtime/model/activation_layout.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"
#include "runtime/observe/memory_plan.h"
#include "runtime/plans.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::runtime {

// What the plan needs to know beyond the config and the model's layers.
struct RunMemoryFacts {
  DType compute_dtype = DType::f32;
  int64_t float_input_numel = 0;            // per sample, when the model's input is fp32
  int64_t optimizer_bytes_per_element = 0;  // the optimizer's state (0 without one)
  int64_t optimizer_states = 0;             // its state tensors (NVMe swap files)
  bool training = true;                     // false: --eval_only, no gradients or optimizer state
  CheckpointingOptions checkpointing;
  bool device_is_host = true;
  Device* host = nullptr;  // where an offloaded optimizer reads its gradients (the run's host device)
  int ranks_per_node = 1;
};

// A setting to plan: a ZeRO stage, CPU offload, a rank count.
struct MemorySetting {
  int stage = 0;
  bool offload_optimizer = false;
  bool offload_param = false;  // with offload_optimizer
  int ranks = 1;
};

class RunMemory {
 public:
  // `layers` and `plan` must outlive this object.
  RunMemory(const std::vector<LayerDecl>& layers, const TrainPlan& plan, RunMemoryFacts facts);

  const RunMemoryFacts& facts() const { return facts_; }
  // The run's own setting: its stage, rank count and offloads (none for the optimizer when not training).
  MemorySetting setting(int world) const;
  // The optimizer offload the run applies (the plan's when training, none otherwise).
  OptimizerOffloadPlan optimizer_offload() const;
  // The plan for the run's own setting, over the layout it trains with and, when parameters are
  // frozen, the layout of the frozen ones (their own store: parameters only).
  MemoryPlan plan(const FlatLayout& layout, int world, const FlatLayout* frozen = nullptr) const;
  // As a run with that setting would plan: the same zero_optimization at another stage, CPU
  // offload as {"device": "cpu"} gives it (the run's own optimizer offload where it is on the CPU).
  MemoryPlan plan_for(const MemorySetting& s) const;
  // DeepSpeed's estimate_zero2/3_model_states_mem_needs for `numel` parameters at `s`, per GPU.
  int64_t deepspeed_estimate(int64_t numel, const MemorySetting& s) const;
  // After running out of `limit` bytes per rank (≤ 0: unknown) at `current`: the other settings
  // that fit by the same plan, smallest change first, or how many ranks would; " ..." or "".
  std::string advice(const MemorySetting& current, int64_t limit) const;

 private:
  MemoryPlan plan_with(const FlatLayout& layout, const ZeroPlan& zero, const OptimizerOffloadPlan& optimizer_offload,
                       const ParamOffloadPlan& param_offload, int world, const FlatLayout* frozen) const;

  const std::vector<LayerDecl>& layers_;
  const TrainPlan& plan_;
  RunMemoryFacts facts_;
};

std::string describe_setting(const MemorySetting& s);  // "stage 3 with offload_optimizer cpu on 4 ranks"

}  // namespace dscpp::runtime
