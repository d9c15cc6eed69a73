// DeepSpeed's `activation_checkpointing` options and the layout they give one micro-batch's
// activations. Both follow from the model's declared sizes and the config alone; the memory plan
// (runtime/observe/memory_plan.h) and the runner that runs the segments
// (runtime/train/activation_checkpointing.h) read the same layout, so the plan is what the runner
// allocates, and it sits with the model's description, below both.
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
#pragma once

#include "configs/ds_config.h"
#include "runtime/model/plugin.h"

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

}  // namespace dscpp::runtime
