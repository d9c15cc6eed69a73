// What a training run tells its user as it goes: after every optimizer step the monitors'
// events (csv_monitor, tensorboard: DeepSpeed's tags, monitors.h), every steps_per_print steps
// the progress line (the loss averaged over the ranks and the steps since the last line,
// throughput over that window, lr, gradient norm, loss scale, memory, elapsed and remaining
// time) with DeepSpeed's wall_clock_breakdown timers and the NVMe swap traffic, and at the end
// the run's throughput after its warm-up steps and the comms logger's summary.
#pragma once

#include "collectives/communicator.h"
#include "configs/ds_config.h"
#include "configs/plans.h"
#include "device/device.h"
#include "runtime/observe/comms_log.h"
#include "runtime/observe/monitors.h"
#include "runtime/observe/train_log.h"
#include "runtime/offload/optimizer_offload.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct StepLogOptions {
  int64_t steps_per_print = 10;  // ≤ 0: no progress lines
  bool wall_clock_breakdown = false;
  config::TensorboardConfig csv_monitor;
  config::TensorboardConfig tensorboard;
  config::CommsLoggerConfig comms_logger;
  std::string config_file;        // for the comms logger's messages
  int64_t train_batch = 1;        // samples per optimizer step, all ranks
  int64_t tokens_per_sample = 0;  // 0: the model has no tokens

  static StepLogOptions for_plan(const config::TrainPlan& plan, int64_t tokens_per_sample) {
    return {plan.steps_per_print, plan.wall_clock_breakdown, plan.csv_monitor, plan.tensorboard, plan.comms_logger,
            plan.file_name,       plan.batch.train_batch,    tokens_per_sample};
  }
};

// One optimizer step as the log sees it.
struct StepOutcome {
  int64_t step = 0, total_steps = 0;
  int64_t global_samples = 0;
  int64_t skipped = 0;            // steps skipped so far
  double local_loss = 0;          // this rank's mean loss over the step's micro-batches
  std::optional<double> lr;       // the lr the step used; unset: skipped (the last one stands)
  double grad_norm = -1;          // < 0: not computed
  double loss_scale = 0;          // 0: no loss scaling
  std::optional<SwapStats> swap;  // NVMe optimizer swap counters so far, when swapping
  std::string extra;              // a further line for the progress print (activation checkpointing's profile)
};

class StepLog {
 public:
  StepLog(const StepLogOptions& options, comm::Communicator& world, Device& device);

  // The named regions of a step (fwd, bwd, ...), synchronized with the device under wall_clock_breakdown.
  Timers& timers() { return timers_; }

  // Before the first step of this process (a resumed run counts from its checkpoint's step and
  // samples).
  void begin(int64_t first_step, int64_t samples);
  // Collective: the loss is averaged over the ranks every step. Prints on rank 0.
  void after_step(const StepOutcome& s);
  // "trained N steps in T s; after the first 2: S samples/s, T tokens/s" (rank 0).
  void end(int64_t last_step);
  // An evaluation's metrics, as monitor events at `samples` (rank 0 writes them).
  void record_eval(const std::vector<MonitorEvent>& events);
  // The comms logger's summary of the whole run; "" without one.
  std::string comms_summary() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string swap_line(const SwapStats& now, double window_s);
  std::vector<MonitorEvent> step_events(const StepOutcome& s, double loss);

  StepLogOptions options_;
  comm::Communicator& world_;
  Device& device_;
  Timers timers_;
  std::map<std::string, double> timers_at_step_;  // the timers' totals after the last step
  Monitors monitors_;
  std::shared_ptr<comm::CommsLogger> comms_log_;  // comms_logger.enabled
  double last_lr_ = 0;
  SwapStats swap_at_print_;
  int64_t first_step_ = 0;
  Clock::time_point run_start_, timed_from_;
  // The window since the last print.
  Clock::time_point window_start_;
  int64_t window_steps_ = 0;
  int64_t window_loss_steps_ = 0;  // of window_steps_, those with a finite loss
  double window_loss_ = 0;
};

}  // namespace dscpp::runtime
