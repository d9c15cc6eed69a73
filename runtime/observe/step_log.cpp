#include "runtime/observe/step_log.h"

#include "core/log.h"
#include "runtime/observe/comms_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dscpp::runtime {

namespace {
// DeepSpeed's throughput timer leaves out the first 2 steps (warm-up); so does the summary.
constexpr int64_t kWarmupSteps = 2;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

StepLog::StepLog(const StepLogOptions& options, comm::Communicator& world, Device& device)
    : options_(options),
      world_(world),
      device_(device),
      monitors_(options.csv_monitor, options.tensorboard, world.rank() == 0) {
  // wall_clock_breakdown times device work, not launches: its timers synchronize the device.
  if (options_.wall_clock_breakdown) timers_.synchronize_with(&device_);
  comms_log_ = comms_logger_for(options_.comms_logger, options_.config_file, world);
}

void StepLog::begin(int64_t first_step, int64_t samples) {
  first_step_ = first_step;
  run_start_ = timed_from_ = window_start_ = Clock::now();
  if (first_step > 0) monitors_.resumed_at(samples);
  if (const std::string where = monitors_.where(); !where.empty() && world_.rank() == 0)
    log::info("monitors (x-axis: samples): {}", where);
}

void StepLog::after_step(const StepOutcome& s) {
  if (s.step - first_step_ == kWarmupSteps) timed_from_ = Clock::now();
  if (s.lr) last_lr_ = *s.lr;
  double loss = s.local_loss;
  if (world_.size() > 1) {
    world_.allreduce(&loss, 1, DType::f64);
    loss /= world_.size();
  }
  if (world_.rank() == 0) {
    monitors_.write(step_events(s, loss));
    monitors_.flush();  // as DeepSpeed's monitors: a killed run leaves every step it finished
  }
  if (std::isfinite(loss)) {  // a skipped non-finite step was warned about; it does not poison the mean
    window_loss_ += loss;
    ++window_loss_steps_;
  }
  ++window_steps_;
  const int64_t every = options_.steps_per_print;
  if (every <= 0 || (s.step % every != 0 && s.step != s.total_steps)) return;
  const double secs = seconds_since(window_start_);
  StepReport r;
  r.step = s.step;
  r.total_steps = s.total_steps;
  r.loss = window_loss_steps_ > 0 ? window_loss_ / static_cast<double>(window_loss_steps_)
                                  : std::numeric_limits<double>::quiet_NaN();
  r.lr = last_lr_;
  r.samples_per_s = static_cast<double>(window_steps_ * options_.train_batch) / secs;
  r.tokens_per_s = r.samples_per_s * static_cast<double>(options_.tokens_per_sample);
  r.grad_norm = s.grad_norm;
  r.skipped = s.skipped;
  r.loss_scale = s.loss_scale;
  r.memory = device_.stats();
  r.elapsed_s = seconds_since(run_start_);
  // The rate after the warm-up steps where there is one, else the whole run's so far.
  const bool warmed = s.step - first_step_ > kWarmupSteps;
  const double per_step = warmed ? seconds_since(timed_from_) / static_cast<double>(s.step - first_step_ - kWarmupSteps)
                                 : r.elapsed_s / static_cast<double>(std::max<int64_t>(s.step - first_step_, 1));
  r.remaining_s = per_step * static_cast<double>(s.total_steps - s.step);
  const std::string swap = s.swap ? swap_line(*s.swap, secs) : std::string();
  if (world_.rank() == 0) {
    log::info("{}", format_step_line(r));
    if (!swap.empty()) log::info("{}", swap);
    if (!s.extra.empty()) log::info("{}", s.extra);
    if (options_.wall_clock_breakdown) log::info("time (ms) | {}", timers_.report_and_reset());
  }
  timers_at_step_.clear();  // the timers restart from 0 after a print
  window_start_ = Clock::now();
  window_steps_ = 0;
  window_loss_steps_ = 0;
  window_loss_ = 0;
}

// NVMe swapping since the last print: traffic, and the share of the wall time the step spent
// blocked on it (what pipeline_read/pipeline_write exist to hide).
std::string StepLog::swap_line(const SwapStats& now, double window_s) {
  SwapStats d = now;
  d.bytes_read -= swap_at_print_.bytes_read;
  d.bytes_written -= swap_at_print_.bytes_written;
  d.wait_s -= swap_at_print_.wait_s;
  swap_at_print_ = now;
  return fmt::format("optimizer swap (rank {}): read {}, wrote {}, io_wait={:.3f} s = {:.1f}% of {:.3f} s of steps",
                     world_.rank(), format_bytes(d.bytes_read), format_bytes(d.bytes_written), d.wait_s,
                     100.0 * d.wait_s / std::max(window_s, 1e-9), window_s);
}

std::string StepLog::comms_summary() const { return comms_log_ ? comms_log_->summary() : std::string(); }

void StepLog::record_eval(const std::vector<MonitorEvent>& events) {
  if (world_.rank() != 0) return;
  monitors_.write(events);
  monitors_.flush();
}

// DeepSpeed's events of an optimizer step: the loss and lr, the loss scale under fp16, and with
// wall_clock_breakdown the step's times in ms (backward = its compute + its gradient reduction).
std::vector<MonitorEvent> StepLog::step_events(const StepOutcome& s, double loss) {
  std::vector<MonitorEvent> e = {{"Train/Samples/train_loss", loss, s.global_samples},
                                 {"Train/Samples/lr", last_lr_, s.global_samples}};
  if (s.loss_scale > 0) e.push_back({"Train/Samples/loss_scale", s.loss_scale, s.global_samples});
  if (!options_.wall_clock_breakdown) return e;
  auto ms = [&](const char* timer) {
    const double total = timers_.total(timer), before = timers_at_step_[timer];
    timers_at_step_[timer] = total;
    return (total - before) * 1e3;
  };
  const double fwd = ms("fwd"), bwd = ms("bwd"), allreduce = ms("bwd_allreduce"), step = ms("step");
  for (const auto& [name, value] : {std::pair{"forward", fwd},
                                    {"backward", bwd + allreduce},
                                    {"backward_inner", bwd},
                                    {"backward_allreduce", allreduce},
                                    {"step", step}})
    e.push_back({fmt::format("Train/Samples/elapsed_time_ms_{}", name), value, s.global_samples});
  return e;
}

void StepLog::end(int64_t last_step) {
  if (world_.rank() != 0) return;
  monitors_.flush();
  if (const int64_t timed = last_step - first_step_ - kWarmupSteps; timed > 0) {
    const double secs = seconds_since(timed_from_);
    const double samples = static_cast<double>(timed * options_.train_batch) / secs;
    log::info("trained {} steps in {:.2f} s; after the first {}: {:.1f} samples/s{}", last_step - first_step_,
              seconds_since(run_start_), kWarmupSteps, samples,
              options_.tokens_per_sample
                  ? fmt::format(", {:.0f} tokens/s", samples * static_cast<double>(options_.tokens_per_sample))
                  : std::string());
  }
}

}  // namespace dscpp::runtime
