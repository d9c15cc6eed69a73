// Optimizer: the update rule the engine applies to the fp32 master weights this rank owns.
//
// The engine hands the optimizer flat fp32 groups: at stage 0 the whole model, under ZeRO the
// rank's partition (or stage-3 sub-groups). State (moments, momentum buffers, accumulators)
// is allocated per group on the given device, zero-initialised, category optimizer_state.
// The math lives in kernels/optimizer_math.h (shared host/device functions); the CPU loops are
// vectorised (AVX-512 / AVX2 chosen at run time) and run on the core thread pool.
#pragma once

#include "configs/ds_config.h"
#include "device/device.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dscpp::runtime {

// A [offset, offset+numel) range of a group that is one parameter tensor. LAMB's trust ratio
// is computed per segment (DeepSpeed's FusedLamb is per parameter; under ZeRO DeepSpeed hands
// it one flat tensor per partition, which is one segment).
struct Segment {
  int64_t offset = 0;
  int64_t numel = 0;
};

// A state tensor of one group, for checkpoints ("exp_avg", "exp_avg_sq", "momentum_buffer",
// "sum", ...). `data` points at the live state (fp32, `numel` elements); for an external
// group, at the arrays bound last.
struct StateTensor {
  std::string name;
  float* data = nullptr;
  int64_t numel = 0;
};

// Per-step hyperparameters that a scheduler may change; unset = the configured value.
struct StepOverrides {
  std::optional<double> lr;
  std::optional<double> momentum;  // Adam-family beta1, SGD momentum (OneCycle's cycle_momentum)
  std::optional<double> beta2;     // Adam-family beta2 (OneCycle pins it to 0.99 while cycling)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  // "adamw", "adam", "lamb", "sgd", "adagrad", "lion"
  virtual double base_lr() const = 0;
  virtual double base_momentum() const = 0;  // beta1 or SGD momentum; 0 when none

  // Bytes of state per parameter element a new group gets (Adam: m and v = 8), for memory plans.
  virtual int64_t state_bytes_per_element() const = 0;

  // Registers a flat group of `numel` fp32 elements; returns its index (0, 1, ...).
  virtual int add_group(int64_t numel, std::vector<Segment> segments) = 0;
  // The same with the group's state on `device` instead of the optimizer's (partial optimizer
  // offload: one optimizer steps the offloaded sub-groups on the host and the others on the
  // training device, as DeepSpeed's CPU Adam and GPU Adam pair does). `device` must be
  // one the engine allocates on (its DeviceMath runs the update).
  virtual int add_group_on(Device& device, int64_t numel, std::vector<Segment> segments) = 0;

  // External state (optimizer offload: the state lives in host memory or is swapped through
  // NVMe buffers that the caller manages). Such a group allocates nothing; before each step()
  // or state() the caller binds one array of numel floats per state_names() entry. The state
  // set must be fixed from the start (SGD's lazily created momentum buffer is refused).
  virtual std::vector<std::string> state_names() const = 0;
  virtual int add_external_group(int64_t numel, std::vector<Segment> segments) = 0;
  // Ranges of group `group` that take no weight decay (a torch parameter group with
  // weight_decay 0: biases and norms under the HF Trainer's grouping). Lamb's trust ratio is
  // then taken per segment piece on either side of a range boundary, as DeepSpeed's per-group
  // flat partitions split it.
  virtual void exclude_from_weight_decay(int group, std::vector<Segment> ranges) = 0;
  // `initialise`: fill the arrays with the optimizer's initial state (zeros, or Adagrad's
  // initial_accumulator_value) — for a group that has never stepped.
  virtual void bind_state(int group, const std::vector<float*>& state, bool initialise) = 0;
  // One update of group `group`: `w` (numel fp32, updated in place) with gradient `grad`
  // (already averaged, unscaled and clipped). Increments the group's step count first.
  virtual void step(int group, float* w, const float* grad, const StepOverrides& overrides) = 0;

  virtual std::vector<StateTensor> state(int group) = 0;
  virtual int64_t step_count(int group) const = 0;
  virtual void set_step_count(int group, int64_t steps) = 0;
};

// Builds the optimizer a DeepSpeed config names ("Adam", "AdamW", "Lamb", "SGD", "Adagrad",
// "Lion", in any of DeepSpeed's spellings). Throws dscpp::Error naming the type for the
// DeepSpeed optimizers dscpp does not implement (OneBitAdam, ...).
std::unique_ptr<Optimizer> make_optimizer(const config::OptimizerConfig& config, Device& device);

}  // namespace dscpp::runtime
