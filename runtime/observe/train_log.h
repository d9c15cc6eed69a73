// What a training run tells its user: the steps_per_print line (step, loss, lr, samples/s,
// tokens/s, memory, time), and DeepSpeed's wall_clock_breakdown timers.
#pragma once

#include "configs/ds_config.h"
#include "core/byte_size.h"  // format_bytes, for the step line and the memory reports printed beside it
#include "device/device.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <string>

namespace dscpp::runtime {

// Named timers summed over an accumulation window (DeepSpeed's fwd, bwd, bwd_allreduce, step).
//
// On an asynchronous device (CUDA) a region's host code only enqueues its kernels, so host
// clocks around it measure launches, and the time shows up wherever the host next waits (the
// loss read-back). With a device set (wall_clock_breakdown on), each Scope therefore
// synchronizes the device at its start and at its end, as DeepSpeed's SynchronizedWallClockTimer
// does: the times are device time, at the cost of the overlap between regions. Without one the
// Scopes never synchronize, so runs without wall_clock_breakdown keep overlapping.
class Timers {
 public:
  using Clock = std::chrono::steady_clock;
  class Scope {
   public:
    Scope(Timers& t, const char* name) : t_(t), name_(name), exceptions_(std::uncaught_exceptions()) {
      if (t_.device_) t_.device_->synchronize();  // work enqueued before the region is not its time
      start_ = Clock::now();
    }
    // A region left by an exception is not timed (and not synchronized: a throwing
    // synchronize during unwinding would terminate the process).
    ~Scope() noexcept(false) {
      if (std::uncaught_exceptions() > exceptions_) return;
      if (t_.device_) t_.device_->synchronize();
      t_.add(name_, std::chrono::duration<double>(Clock::now() - start_).count());
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timers& t_;
    const char* name_;
    int exceptions_;
    Clock::time_point start_;
  };
  // The device whose work the Scopes wait for; null (the default): host time only.
  void synchronize_with(Device* device) { device_ = device; }
  void add(const std::string& name, double seconds) { totals_[name] += seconds; }
  // "fwd: 12.34 | bwd: 30.10 | ..." in milliseconds, in a fixed order; then resets.
  std::string report_and_reset();
  double total(const std::string& name) const {
    auto it = totals_.find(name);
    return it == totals_.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> totals_;
  Device* device_ = nullptr;
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
  double elapsed_s = -1;    // since this process's first step; < 0: not shown
  double remaining_s = -1;  // to total_steps at the rate so far
};

std::string format_step_line(const StepReport& r);
// "42s", "4m05s", "2h03m".
std::string format_duration(double seconds);

}  // namespace dscpp::runtime
