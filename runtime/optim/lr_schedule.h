// Learning-rate schedules with DeepSpeed's exact formulas (deepspeed/runtime/lr_schedules.py):
// WarmupLR (log and linear warmup), WarmupDecayLR, WarmupCosineLR, OneCycle (with
// cycle_momentum), LRRangeTest. Without a "scheduler" block, the plan's default schedule: the
// HF Trainer's (linear, cosine, constant_with_warmup: transformers' formulas, warmup from 0) or
// the optimizer's LR unchanged (constant).
//
// Protocol (as DeepSpeed's engine drives it): the schedule is built before the first step and
// sets the LR for optimizer step 1; after every optimizer step that was not skipped (fp16
// overflow), the engine calls step(). `lr()` / `momentum()` are what the next optimizer step
// uses (DeepSpeed: the optimizer param_group values at that moment).
//
// Before the first step() (last_batch_iteration −1) lr() is what DeepSpeed's constructor
// writes into the optimizer: WarmupLR/WarmupDecayLR warmup_min_lr, WarmupCosineLR 0 (it writes
// get_lr() = [0.0]), OneCycle cycle_min_lr (and betas (cycle_min_mom, 0.99)), LRRangeTest
// lr_range_test_min_lr, constant: the optimizer's lr. A config with last_batch_iteration ≠ −1
// makes DeepSpeed write nothing at construction, so lr() is the optimizer's lr until step().
// Per-group lists in the config must have one entry: dscpp schedules one parameter group.
#pragma once

#include "configs/ds_config.h"
#include "configs/plans.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace dscpp::runtime {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual std::string name() const = 0;  // DeepSpeed's type name, or "constant" without a block
  virtual double lr() const = 0;
  // beta1 / momentum the next step uses; nullopt = leave the optimizer's configured value.
  // DeepSpeed sets betas only on optimizers that have them (Adam family, Lamb, Lion); for
  // the others (SGD) OneCycle disables cycle_momentum, so the engine ignores this there.
  virtual std::optional<double> momentum() const = 0;
  // β2 the next step uses when the schedule forces it (OneCycle with cycle_momentum writes
  // betas = (β1, 0.99)); nullopt = leave the optimizer's configured β2.
  virtual std::optional<double> beta2() const { return std::nullopt; }
  virtual void step() = 0;

  // DeepSpeed's `last_batch_iteration` (−1 before the first step()); restoring it restores
  // the schedule exactly (checkpoints store this one integer, as DeepSpeed's state_dict does).
  virtual int64_t last_batch_iteration() const = 0;
  virtual void set_last_batch_iteration(int64_t it) = 0;
};

// `base_lr` / `base_momentum`: the optimizer's configured lr and beta1 (or SGD momentum).
// Throws dscpp::Error for the torch schedulers dscpp does not run, naming the type.
// `fallback`: the schedule when `config` is unset.
std::unique_ptr<LrSchedule> make_lr_schedule(const std::optional<config::SchedulerConfig>& config, double base_lr,
                                             double base_momentum, const config::DefaultSchedulePlan& fallback = {});

}  // namespace dscpp::runtime
