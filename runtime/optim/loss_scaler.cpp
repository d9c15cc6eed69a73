#include "runtime/optim/loss_scaler.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dscpp::runtime {
namespace {

constexpr double kScaleFactor = 2.0;  // DeepSpeed's scale_factor; no config key changes it

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

LossScaler::LossScaler(const LossScalePlan& options) : options_(options) {
  if (!positive_finite(options.init_scale))
    fail("loss scaler: the initial scale must be a positive finite number, got {} (fp16.loss_scale or "
         "fp16.initial_scale_power)",
         options.init_scale);
  if (dynamic()) {
    if (options.scale_window < 1)
      fail("loss scaler: fp16.loss_scale_window must be at least 1 for dynamic loss scaling, got {}",
           options.scale_window);
    if (options.hysteresis < 1)
      fail("loss scaler: fp16.hysteresis must be at least 1, got {}", options.hysteresis);
    if (!positive_finite(options.min_scale))
      fail("loss scaler: fp16.min_loss_scale must be a positive number, got {}", options.min_scale);
  }
  state_.cur_scale = options.init_scale;
  state_.cur_hysteresis = options.hysteresis;
}

void LossScaler::update(bool overflow) {
  if (options_.rule == LossScaleRule::zero)
    update_zero(overflow);
  else if (options_.rule == LossScaleRule::legacy)
    update_legacy(overflow);
  else if (overflow)
    state_.last_overflow_iter = state_.cur_iter;
  if (overflow) ++state_.skipped_steps;
  ++state_.cur_iter;
}

// DynamicLossScaler.update_scale (DeepSpeed 0.19.8). The stable interval leaves out the step
// right after an overflow, so the first doubling comes on the (window + 1)-th clean step, as in
// update_legacy; an overflow absorbed by hysteresis still restarts the window. Releases up to
// 0.16.4 counted that step too and doubled one step earlier.
void LossScaler::update_zero(bool overflow) {
  LossScalerState& s = state_;
  const LossScalePlan& o = options_;
  if (overflow) {
    if (o.hysteresis == 1 || s.cur_hysteresis == 1) {
      if (s.cur_scale == o.min_scale && o.raise_at_min_scale)
        fail("fp16 gradients overflowed (inf/NaN) while the loss scale was already at its minimum {} "
             "(fp16.min_loss_scale = {}): DeepSpeed stops here (\"Current loss scale already at minimum - "
             "cannot decrease scale anymore\"). The model diverges or overflows in fp16 even unscaled: lower the "
             "learning rate, set gradient_clipping, lower fp16.min_loss_scale, or train in bf16 "
             "(\"bf16\": {{\"enabled\": true}}).",
             s.cur_scale, o.min_scale);
      s.cur_scale = std::max(s.cur_scale / kScaleFactor, o.min_scale);
    } else {
      --s.cur_hysteresis;
    }
    s.last_overflow_iter = s.cur_iter;
  } else {
    if (o.consecutive_hysteresis) s.cur_hysteresis = o.hysteresis;
    const int64_t stable = s.cur_iter - s.last_overflow_iter - 1;
    if (stable > 0 && stable % o.scale_window == 0) {
      if (!o.consecutive_hysteresis) s.cur_hysteresis = o.hysteresis;
      s.cur_scale *= kScaleFactor;
    }
  }
}

// FP16_Optimizer._update_scale (fused and unfused alike): the window is update_zero's, but
// without hysteresis, and the minimum only clamps.
void LossScaler::update_legacy(bool overflow) {
  LossScalerState& s = state_;
  if (overflow) {
    s.cur_scale = std::max(s.cur_scale / kScaleFactor, options_.min_scale);
    s.last_overflow_iter = s.cur_iter;
  } else {
    int64_t stable = s.cur_iter - s.last_overflow_iter - 1;
    if (stable > 0 && stable % options_.scale_window == 0) s.cur_scale *= kScaleFactor;
  }
}

void LossScaler::restore(const LossScalerState& s) {
  if (!positive_finite(s.cur_scale))
    fail("loss scaler state: cur_scale must be positive and finite, got {}", s.cur_scale);
  if (s.cur_iter < 0) fail("loss scaler state: cur_iter must be >= 0, got {}", s.cur_iter);
  if (s.last_overflow_iter < -1 || s.last_overflow_iter >= s.cur_iter)
    fail("loss scaler state: last_overflow_iter must be in [-1, cur_iter) = [-1, {}), got {}", s.cur_iter,
         s.last_overflow_iter);
  if (s.cur_hysteresis < 1) fail("loss scaler state: cur_hysteresis must be >= 1, got {}", s.cur_hysteresis);
  if (s.skipped_steps < 0 || s.skipped_steps > s.cur_iter)
    fail("loss scaler state: skipped_steps must be in [0, cur_iter = {}], got {}", s.cur_iter, s.skipped_steps);
  state_ = s;
}

std::string LossScaler::describe() const {
  const LossScalePlan& o = options_;
  switch (o.rule) {
    case LossScaleRule::none: return "none (scale 1, no overflow check)";
    case LossScaleRule::fixed: return fmt::format("static {:g}", o.init_scale);
    case LossScaleRule::zero:
      return fmt::format("{}: initial {:g}, window {}, hysteresis {}{}, min {:g}", rule_name(o.rule), o.init_scale,
                         o.scale_window, o.hysteresis, o.consecutive_hysteresis ? " (consecutive)" : "", o.min_scale);
    case LossScaleRule::legacy:
      return fmt::format("{}: initial {:g}, window {}, min {:g}", rule_name(o.rule), o.init_scale, o.scale_window,
                         o.min_scale);
  }
  return "?";
}

}  // namespace dscpp::runtime
