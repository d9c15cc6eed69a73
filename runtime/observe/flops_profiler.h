// DeepSpeed's flops profiler (the `flops_profiler` section) for plugin models: the FLOPs of each
// layer's forward pass, counted from the ops it calls, and the time of each layer's forward and
// backward, reported at `profile_step` the way DeepSpeed's profiler prints its summary.
//
// Counting follows DeepSpeed's profiler, which counts the forward pass only: a GEMM is 2·M·N·K
// (the fused attention counts its q·kᵀ and probs·v products whole, 4·batch·heads·T²·head_dim,
// as the unfused matmuls would, although the kernel skips the masked half), GELU, softmax and
// elementwise ops one FLOP per element, layer norm 5 per element, embedding lookups none.
// Backward is taken as 2× forward and the step's model FLOPs as
// 3·(1 + recompute_fwd_factor)·forward, DeepSpeed's convention.
//
// The profiler wraps the ops table: the engine hands the plugin `ops()` while it is enabled and
// says which layer is running (enter/leave); counting costs a few adds per op call. One
// profiler per process at a time (the wrappers find it through a process-wide pointer).
//
// Times are device time: on an asynchronous device (CUDA) the ops only enqueue kernels, so host
// clocks around a layer would measure its launches, and the step's work would land on whatever
// waits first (the loss read-back). Between begin_step() and end_step() — the profiled step
// only — the profiler synchronizes the device before starting and after ending each measured
// region (each layer's forward and backward, and the step), so the per-layer latencies add up,
// within the synchronization overhead, to the step's. Other steps never synchronize.
#pragma once

#include "configs/ds_config.h"
#include "device/device.h"
#include "dscpp/model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::runtime {

class FlopsProfiler {
 public:
  FlopsProfiler(const dscpp_ops& real, std::vector<std::string> layer_names, std::vector<int64_t> layer_params,
                const config::FlopsProfilerConfig& config);
  ~FlopsProfiler();
  FlopsProfiler(const FlopsProfiler&) = delete;
  FlopsProfiler& operator=(const FlopsProfiler&) = delete;

  // The counting table (valid as long as the profiler).
  const dscpp_ops& ops() const { return table_; }
  int64_t profile_step() const { return config_.profile_step; }

  // Ops called from now on belong to `layer` (its forward or backward) until leave().
  void enter(int layer, bool backward);
  void leave();
  // Counters back to zero (at the start of the profiled step).
  void reset();
  // The profiled step: synchronizes `device`, resets the counters and starts the step's clock;
  // until end_step() every enter() and leave() synchronizes `device` too.
  void begin_step(Device& device);
  // Synchronizes the device and stops synchronizing; the seconds since begin_step().
  double end_step();
  bool in_step() const { return device_ != nullptr; }

  // Forward FLOPs counted since reset() (for tests).
  double forward_flops() const;
  // Seconds in `layer`'s forward or backward since reset() (for tests).
  double layer_seconds(int layer, bool backward) const {
    const LayerCount& l = layers_.at(static_cast<size_t>(layer));
    return backward ? l.bwd_s : l.fwd_s;
  }
  // The summary for a step that took `step_s` seconds with `samples` samples on this rank.
  std::string report(double step_s, int64_t samples) const;
  // The report where DeepSpeed puts it: flops_profiler.output_file when set, else the log.
  void publish(double step_s, int64_t samples) const;

 private:
  struct LayerCount {
    double fwd_flops = 0, fwd_s = 0, bwd_s = 0;
    int64_t fwd_calls = 0;
  };
  friend struct Wrappers;
  void count(double flops);
  bool close();  // leave(); whether it synchronized the device (a layer was open, in the profiled step)

  dscpp_ops real_;
  dscpp_ops table_;  // real_ with the counting entries
  std::vector<std::string> names_;
  std::vector<int64_t> params_;
  config::FlopsProfilerConfig config_;
  std::vector<LayerCount> layers_;
  int current_ = -1;
  bool backward_ = false;
  double entered_at_ = 0;
  Device* device_ = nullptr;  // set during the profiled step
  double step_started_at_ = 0;
};

}  // namespace dscpp::runtime
