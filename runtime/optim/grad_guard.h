// What stands between the reduced gradients and the optimizer step: the overflow check that
// drives fp16 loss scaling (and bf16.check_grad_overflow), the global gradient norm, clipping,
// and the policy for NaN or infinite losses and norms.
//
// Every decision is agreed over the world before it is taken, so all ranks skip or take the
// same steps and no collective is left waiting. At stage 0 each rank holds the same reduced
// gradients; at stages 1-3 each holds its partition, and the partitions' sums add up to the
// world's.
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/optim/loss_scaler.h"

#include <cstdint>
#include <span>
#include <string>

namespace dscpp::runtime {

// One contiguous run of this rank's gradients, with the device it lives on (offloaded
// optimizer partitions: the host).
struct GradSlice {
  void* data = nullptr;
  int64_t numel = 0;
  Device* device = nullptr;
};

struct GradGuardOptions {
  double clipping = 0;               // gradient_clipping; 0 = none
  bool check_bf16_overflow = false;  // bf16.check_grad_overflow: skip a step with inf/NaN, no scaling
  int64_t max_nonfinite = 3;         // non-finite steps in a row that stop the run (DSCPP_MAX_NONFINITE_STEPS)

  // The plan's gradient_clipping and bf16.check_grad_overflow, and DSCPP_MAX_NONFINITE_STEPS.
  static GradGuardOptions for_plan(const TrainPlan& plan);
};

struct GradVerdict {
  bool step = false;       // false: skip the optimizer and LR-schedule step
  float grad_scale = 1;    // what the update multiplies the gradients by: unscale and clip in one
  double norm = -1;        // global norm of the unscaled gradients; -1 when the step was skipped first
};

class GradGuard {
 public:
  GradGuard(const LossScalePlan& scaling, GradGuardOptions options, comm::Communicator& world);

  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }
  // Whether check() looks for inf/NaN in the gradients (fp16, or bf16.check_grad_overflow).
  bool checks_overflow() const { return scaler_.checks_overflow() || options_.check_bf16_overflow; }

  // Collective. `slices`: this rank's gradients, scaled by scaler().scale(); `partitioned`: the
  // ranks hold different slices (ZeRO 1-3 on more than one rank); `local_loss`: this rank's loss
  // for the step; `step`: the step's number, for messages. Updates the loss scale; throws once
  // max_nonfinite non-finite steps came in a row (or at the minimum loss scale, as DeepSpeed does).
  GradVerdict check(std::span<const GradSlice> slices, DType dtype, bool partitioned, double local_loss,
                    int64_t step);

  int64_t nonfinite_in_a_row() const { return nonfinite_in_a_row_; }

 private:
  GradVerdict skip_nonfinite(const std::string& what, int64_t step);

  LossScaler scaler_;
  GradGuardOptions options_;
  comm::Communicator& world_;
  int64_t nonfinite_in_a_row_ = 0;
};

}  // namespace dscpp::runtime
