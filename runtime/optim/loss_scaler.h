// DeepSpeed's loss scaling for fp16 mixed precision, as one small state machine.
//
// Four rules, chosen from the config by `config::loss_scale_plan` (configs/plans.h):
//   none    bf16 or fp32: the scale is 1 and gradients are not checked for overflow.
//   fixed   fp16 with `loss_scale` > 0: a constant scale; overflowing steps are still skipped.
//   zero    fp16, ZeRO stages 1-3, dynamic: DeepSpeed 0.19.8's DynamicLossScaler
//           (deepspeed/runtime/fp16/loss_scaler.py) with hysteresis; raises at the minimum.
//   legacy  fp16, stage 0, dynamic: the FP16_Optimizer / FP16_UnfusedOptimizer rule: the same
//           window as `zero`, but no hysteresis, and the minimum only clamps.
// Both dynamic rules halve on overflow and double after `loss_scale_window` clean steps
// (DeepSpeed's factor is always 2), never going below `min_loss_scale`.
//
// The engine calls update() exactly once per optimizer step (at the gradient-accumulation
// boundary), after every rank has agreed on the overflow flag (MAX-allreduce), and skips the
// optimizer and LR-scheduler step when the flag is set. The scaler counts those skipped steps
// (state().skipped_steps, DeepSpeed's engine.skipped_steps), so the engine need not.
#pragma once

#include "runtime/plans.h"

#include <cstdint>
#include <string>

namespace dscpp::runtime {

// Everything a checkpoint must keep to continue the sequence exactly. DeepSpeed (2.7 of the
// engine reference) replaces the whole scaler from the checkpoint on load, so settings changed
// in the config are ignored after a resume; to reproduce that, persist options() too and
// rebuild the scaler from them before restore().
struct LossScalerState {
  double cur_scale = 1.0;
  int64_t cur_iter = 0;             // optimizer steps seen by update()
  int64_t last_overflow_iter = -1;  // cur_iter of the latest overflow; -1 = none yet
  int64_t cur_hysteresis = 1;       // overflows still absorbed before the next halving (zero rule)
  int64_t skipped_steps = 0;        // updates with overflow = optimizer steps skipped
};

class LossScaler {
 public:
  // Checks the options (positive finite scales, window >= 1, hysteresis >= 1); throws
  // dscpp::Error naming the fp16 key otherwise.
  explicit LossScaler(const LossScalePlan& options);

  // The factor the loss is multiplied by before backward (and gradients divided by after).
  double scale() const { return state_.cur_scale; }
  bool dynamic() const { return options_.rule == LossScaleRule::zero || options_.rule == LossScaleRule::legacy; }
  // Whether the engine must test gradients for inf/NaN: fp16 only (fixed or dynamic).
  bool checks_overflow() const { return options_.rule != LossScaleRule::none; }

  // One optimizer step: `overflow` = some rank found inf/NaN in its gradients. Under the zero
  // rule, an overflow while the scale is already min_scale throws dscpp::Error (the state is
  // left unchanged), as DeepSpeed stops the run there.
  void update(bool overflow);

  const LossScalePlan& options() const { return options_; }
  const LossScalerState& state() const { return state_; }
  // Continues from a saved state; throws dscpp::Error if a field is out of range.
  void restore(const LossScalerState& state);

  // One line for the start-up log, e.g. "dynamic (ZeRO rule): initial 65536, window 1000, ...".
  std::string describe() const;

 private:
  void update_zero(bool overflow);
  void update_legacy(bool overflow);

  LossScalePlan options_;
  LossScalerState state_;
};

}  // namespace dscpp::runtime
