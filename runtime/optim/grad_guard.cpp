#include "runtime/optim/grad_guard.h"

#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"
#include "kernels/device_math.h"

#include <fmt/format.h>

#include <cmath>

namespace dscpp::runtime {

GradGuardOptions GradGuardOptions::for_plan(const TrainPlan& plan) {
  GradGuardOptions o;
  o.clipping = plan.gradients.clipping;
  o.check_bf16_overflow = plan.gradients.check_bf16_overflow;
  o.max_nonfinite =
      knob_int("DSCPP_MAX_NONFINITE_STEPS", 1, "a positive whole number (steps in a row)").value_or(o.max_nonfinite);
  return o;
}

GradGuard::GradGuard(const LossScalePlan& scaling, GradGuardOptions options, comm::Communicator& world)
    : scaler_(scaling), options_(options), world_(world) {
  if (options_.max_nonfinite < 1)
    fail("the limit of non-finite steps in a row must be ≥ 1 (got {})", options_.max_nonfinite);
}

GradVerdict GradGuard::check(std::span<const GradSlice> slices, DType dtype, bool partitioned, double local_loss,
                             int64_t step) {
  const double scale = scaler_.scale();
  GradVerdict v;
  v.grad_scale = static_cast<float>(1.0 / scale);
  if (checks_overflow()) {
    double overflow = 0;
    for (const GradSlice& s : slices)
      overflow = overflow != 0 || kernels::math_of(*s.device).any_nonfinite(s.data, dtype, s.numel);
    // Agreed at every stage: at stage 0 the reduced gradients are the same everywhere, but a
    // rank-local fault must not let the ranks' scalers diverge.
    if (world_.size() > 1) world_.allreduce(&overflow, 1, DType::f64, comm::ReduceOp::max);
    if (scaler_.checks_overflow()) {
      scaler_.update(overflow != 0);
      if (overflow != 0) return v;  // the scaler's business, not a non-finite step
    } else if (overflow != 0) {
      return skip_nonfinite("gradients (bf16.check_grad_overflow)", step);
    }
  }
  // The global norm and whether any rank's loss was NaN or infinite, in one allreduce.
  // Unpartitioned gradients are the same on every rank, so rank 0's sum stands for the world's
  // (adding zeros keeps it exact).
  double sq = 0;
  for (const GradSlice& s : slices) sq += kernels::math_of(*s.device).sum_squares(s.data, dtype, s.numel);
  double agreed[2] = {partitioned || world_.rank() == 0 ? sq : 0.0, std::isfinite(local_loss) ? 0.0 : 1.0};
  if (world_.size() > 1) world_.allreduce(agreed, 2, DType::f64);
  const double norm = std::sqrt(agreed[0]) / scale;
  if (agreed[1] != 0) return skip_nonfinite("loss", step);
  if (!std::isfinite(norm)) return skip_nonfinite(fmt::format("gradients (global norm {})", norm), step);
  nonfinite_in_a_row_ = 0;
  v.step = true;
  v.norm = norm;
  if (options_.clipping > 0) {
    // DeepSpeed's rule: unscale and clip in one multiplication.
    const double coef = options_.clipping / (norm + 1e-6);
    if (coef < 1.0) v.grad_scale = static_cast<float>(scale == 1.0 ? coef : coef / scale);
  }
  return v;
}

GradVerdict GradGuard::skip_nonfinite(const std::string& what, int64_t step) {
  // Every rank gets here for the same step (what decides it was agreed), so every rank stops
  // together.
  ++nonfinite_in_a_row_;
  if (nonfinite_in_a_row_ >= options_.max_nonfinite)
    fail("step {}: non-finite {}, {} in a row (DSCPP_MAX_NONFINITE_STEPS={}): stopping. The weights "
         "were never updated from a non-finite step and no checkpoint holds one; lower the learning rate, set "
         "gradient_clipping, use bf16 or fp16 loss scaling, or check the data and the model's loss",
         step, what, nonfinite_in_a_row_, options_.max_nonfinite);
  if (world_.rank() == 0)
    log::warn("step {}: non-finite {}; the step is skipped (no optimizer or LR-schedule step), {} in a row, the run "
              "stops at {}",
              step, what, nonfinite_in_a_row_, options_.max_nonfinite);
  return GradVerdict{};
}

}  // namespace dscpp::runtime
