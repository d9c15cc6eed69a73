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
      csv_(world.rank() == 0 ? options.csv_monitor : config::TensorboardConfig{}) {
  // wall_clock_breakdown times device work, not launches: its timers synchronize the device.
  if (options_.wall_clock_breakdown) timers_.synchronize_with(&device_);
  comms_log_ = comms_logger_for(options_.comms_logger, options_.config_file, world);
}

void StepLog::begin(int64_t first_step) {
  first_step_ = first_step;
  run_start_ = timed_from_ = window_start_ = Clock::now();
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
    csv_.record("Train/Samples/train_loss", s.global_samples, loss);
    csv_.record("Train/Samples/lr", s.global_samples, last_lr_);
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
  const std::string swap = s.swap ? swap_line(*s.swap, secs) : std::string();
  if (world_.rank() == 0) {
    log::info("{}", format_step_line(r));
    if (!swap.empty()) log::info("{}", swap);
    if (!s.extra.empty()) log::info("{}", s.extra);
    if (options_.wall_clock_breakdown) log::info("time (ms) | {}", timers_.report_and_reset());
  }
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

void StepLog::end(int64_t last_step) {
  if (world_.rank() != 0) return;
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
