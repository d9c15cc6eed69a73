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
// Segments: with `number_checkpoints` = k (1 ≤ k ≤ n−1) the layers split into k+1 segments,
// segment s = layers [⌊s·n/(k+1)⌋, ⌊(s+1)·n/(k+1)⌋); the inputs of segments 1..k are the k
// checkpoints. Without `number_checkpoints`, k = n−1: every layer boundary is a checkpoint (each
// layer is its own segment, DeepSpeed's usual checkpoint-per-block). Segment 0 reads the batch,
// which the loader keeps anyway; the last segment (it holds the loss layer) is never recomputed,
// because its activations are still in the arena when backward starts. Without the section
// there is one segment: every layer's activations live from forward to backward, as before.
//
// Memory (category activations, planned by the same layout the runner allocates from):
//   arena        max over segments of Σ (output + saved) of the segment's layers, each 64-aligned
//   checkpoints  Σ over kept boundaries of micro_batch · output_numel elements of the compute
//                dtype (4 or 2 bytes), on the device,
//                or with cpu_checkpointing on the host device (plus one device staging buffer of
//                the largest checkpoint that recompute copies it back into)
//   gradients    two buffers of the largest layer output that backward ping-pongs between
// contiguous_memory_optimization: the checkpoints are one preallocated buffer with a 64-aligned
// slot per checkpoint (DeepSpeed's number_checkpoints contiguous buffers) instead of one
// allocation each. Both are allocated once, before the first step; the bytes differ only by the
// slots' alignment.
// partition_activations: DeepSpeed splits each checkpoint across the model-parallel group; dscpp
// has no model parallelism (mp = 1), where DeepSpeed's split is a no-op — so is dscpp's: accepted,
// logged, nothing partitioned (checkpoints are not split across data-parallel ranks, which hold
// different samples).
// synchronize_checkpoint_boundary: Device::synchronize() before and after each segment's forward
// and recompute; a no-op on the CPU device.
// profile: wall time of each segment's forward and recompute, logged at steps_per_print.
#pragma once

#include "configs/ds_config.h"
#include "device/device.h"
#include "runtime/train/plugin.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::runtime {

struct CheckpointingOptions {
  bool enabled = false;     // the section is in the config
  int64_t checkpoints = 0;  // k: layer boundaries kept (resolved)
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous = false;   // contiguous_memory_optimization
  bool synchronize = false;  // synchronize_checkpoint_boundary
  bool profile = false;
};

// From the config's section (absent: off) for a model of `num_layers` layers; fails naming the
// config file, the key, what was expected and what was found — the range depends on the model,
// so it is checked here and not with the config's rules.
CheckpointingOptions checkpointing_options(const std::optional<config::ActivationCheckpointingConfig>& section,
                                           std::string_view file_name, int num_layers);
// One line for the start-up log.
std::string describe_checkpointing(const CheckpointingOptions& o, int num_layers);

// Bytes after each layer's output and saved piece (and each backward gradient buffer) that the
// runner fills with a pattern and checks after the layer's calls (DSCPP_GUARD_BUFFERS).
inline constexpr int64_t kGuardBytes = 64;

// Where every activation byte of one micro-batch lives; the memory plan and the runner both
// read it, so the plan is what the runner allocates.
struct ActivationLayout {
  std::vector<int> segment_begin;            // S+1 entries; segment s = [segment_begin[s], segment_begin[s+1])
  std::vector<int> segment_of;               // per layer
  std::vector<int64_t> output_at, saved_at;  // per layer: byte offsets in the arena
  int64_t arena_bytes = 0;
  std::vector<int64_t> checkpoint_bytes;  // per segment (0 for segment 0)
  std::vector<int64_t> checkpoint_at;     // contiguous: offsets in the one buffer
  int64_t checkpoint_total = 0;           // as allocated
  bool checkpoints_on_host = false;
  int64_t staging_bytes = 0;  // cpu_checkpointing: the device copy for recompute
  int64_t grad_bytes = 0;     // the two backward gradient buffers together, guards included
  bool contiguous = false;

  int segments() const { return static_cast<int>(segment_begin.size()) - 1; }
  int64_t device_bytes(bool training) const {
    return arena_bytes + (checkpoints_on_host ? 0 : checkpoint_total) + staging_bytes + (training ? grad_bytes : 0);
  }
  int64_t host_bytes() const { return checkpoints_on_host ? checkpoint_total : 0; }
};

// `element_bytes`: of the compute dtype, in which layer outputs and their gradients are stored.
ActivationLayout make_activation_layout(const std::vector<LayerDecl>& layers, const CheckpointingOptions& o,
                                        int64_t micro_batch, int64_t element_bytes = 4);

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
