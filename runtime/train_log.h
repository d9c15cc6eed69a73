// What a training run tells its user: the steps_per_print line (step, loss, lr, samples/s,
// tokens/s, memory), DeepSpeed's wall_clock_breakdown timers, and the csv_monitor files.
#pragma once

#include "configs/ds_config.h"
#include "core/device.h"

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>

namespace dscpp::runtime {

// Named timers summed over an accumulation window (DeepSpeed's fwd, bwd, bwd_allreduce, step).
class Timers {
 public:
  using Clock = std::chrono::steady_clock;
  class Scope {
   public:
    Scope(Timers& t, const char* name) : t_(t), name_(name), start_(Clock::now()) {}
    ~Scope() { t_.add(name_, std::chrono::duration<double>(Clock::now() - start_).count()); }

   private:
    Timers& t_;
    const char* name_;
    Clock::time_point start_;
  };
  void add(const std::string& name, double seconds) { totals_[name] += seconds; }
  // "fwd: 12.34 | bwd: 30.10 | ..." in milliseconds, in a fixed order; then resets.
  std::string report_and_reset();

 private:
  std::map<std::string, double> totals_;
};

// DeepSpeed's csv_monitor: one file per event under <output_path>/<job_name>/, named after the
// event with '/' replaced by '_', header "step,<event>", one row per record (x = samples).
class CsvMonitor {
 public:
  explicit CsvMonitor(const config::TensorboardConfig& c);
  bool enabled() const { return enabled_; }
  void record(const std::string& event, int64_t step, double value);
  std::string directory() const { return dir_; }

 private:
  bool enabled_ = false;
  std::string dir_;
  std::map<std::string, std::unique_ptr<std::ofstream>> files_;
};

struct StepReport {
  int64_t step = 0, total_steps = 0;
  double loss = 0;
  double lr = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;  // 0: the model has no tokens
  double grad_norm = -1;    // < 0: not computed
  int64_t skipped = 0;
  double loss_scale = 0;  // 0: no loss scaling (fp32/bf16)
  MemoryStats memory;
};

std::string format_step_line(const StepReport& r);
std::string format_bytes(int64_t bytes);

}  // namespace dscpp::runtime
