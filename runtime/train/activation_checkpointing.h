// Activation checkpointing (DeepSpeed's `activation_checkpointing` section).
//
// The model's n layers are cut into contiguous segments. Forward keeps only each segment's
// input (its checkpoint) and runs the segment's layers in one arena that every segment reuses;
// backward runs the forward of a segment again from its checkpoint (recompute), then the
// segment's backward. Plugins are unchanged: a recompute is the same forward call with the same
// context, including ctx.rng_seed, which is a function of (micro-step, layer) only — so a layer
// that draws random numbers from it (dropout) draws the same ones again; that is the RNG-state
// restore DeepSpeed does. The recomputed activations are therefore bit-identical and so are the
// gradients.
//
// Segments, and where each activation byte lives: runtime/model/activation_layout.h.
// partition_activations: DeepSpeed splits each checkpoint across the model-parallel group; dscpp
// has no model parallelism (mp = 1), where DeepSpeed's split is a no-op — so is dscpp's: accepted,
// logged, nothing partitioned (checkpoints are not split across data-parallel ranks, which hold
// different samples).
// synchronize_checkpoint_boundary: Device::synchronize() before and after each segment's forward
// and recompute; a no-op on the CPU device.
// profile: wall time of each segment's forward and recompute, logged at steps_per_print.
#pragma once

#include "device/device.h"
#include "runtime/model/activation_layout.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::runtime {

// The memory behind an ActivationLayout: the arena, the checkpoints (device or host), staging.
class ActivationMemory {
 public:
  // `host` holds the checkpoints with cpu_checkpointing (required then).
  ActivationMemory(const ActivationLayout& layout, Device& device, Device* host);

  void* output(int layer) const { return arena_ptr(layout_.output_at[static_cast<size_t>(layer)]); }
  void* saved(int layer) const { return arena_ptr(layout_.saved_at[static_cast<size_t>(layer)]); }
  // Keeps `src` (device, the input of `segment`) as its checkpoint and returns the device copy
  // the segment reads in forward.
  const void* keep(int segment, const void* src, size_t bytes);
  // The checkpoint of `segment` on the device again, for its recompute.
  const void* restore(int segment, size_t bytes);

 private:
  void* arena_ptr(int64_t at) const { return static_cast<char*>(arena_.data()) + at; }
  void* slot(int segment) const;

  const ActivationLayout& layout_;
  Device& device_;
  DeviceBuffer arena_, staging_, contiguous_;
  std::vector<DeviceBuffer> separate_;  // per segment, without contiguous_memory_optimization
};

// profile: per segment, time in forward and in recompute since the last report.
class CheckpointProfile {
 public:
  explicit CheckpointProfile(int segments)
      : fwd_(static_cast<size_t>(segments)), recompute_(static_cast<size_t>(segments)) {}
  void add(int segment, bool recompute, std::chrono::steady_clock::duration d);
  // "segment s [layers a-b]: forward x ms, recompute y ms (mean per micro-batch); ..."; resets.
  std::string report(const ActivationLayout& layout);

 private:
  struct Sum {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::vector<Sum> fwd_, recompute_;
};

}  // namespace dscpp::runtime
