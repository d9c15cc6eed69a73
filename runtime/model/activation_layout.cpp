#include "runtime/model/activation_layout.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace dscpp::runtime {

namespace {
constexpr int64_t kAlign = 64;  // what Device::allocate guarantees; carved pieces keep it
int64_t aligned(int64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

CheckpointingOptions checkpointing_options(const std::optional<config::ActivationCheckpointingConfig>& section,
                                           std::string_view file_name, int num_layers) {
  CheckpointingOptions o;
  o.enabled = section.has_value();  // the section's presence turns it on (configs/plans.h)
  if (!o.enabled) return o;
  const config::ActivationCheckpointingConfig& c = *section;
  const int64_t boundaries = std::max(num_layers - 1, 0);
  if (c.number_checkpoints) {
    if (*c.number_checkpoints < 1 || *c.number_checkpoints > boundaries)
      fail(
          "{}: activation_checkpointing.number_checkpoints: expected 1 to {} (the model has {} layers, so {} layer "
          "boundaries to checkpoint), found {}",
          file_name, boundaries, num_layers, boundaries, *c.number_checkpoints);
    o.checkpoints = *c.number_checkpoints;
  } else {
    o.checkpoints = boundaries;
  }
  o.partition_activations = c.partition_activations;
  o.cpu_checkpointing = c.cpu_checkpointing;
  o.contiguous = c.contiguous_memory_optimization;
  o.synchronize = c.synchronize_checkpoint_boundary;
  o.profile = c.profile;
  return o;
}

std::string describe_checkpointing(const CheckpointingOptions& o, int num_layers) {
  if (!o.enabled) return "activation checkpointing: off";
  std::string out = fmt::format(
      "activation checkpointing: {} checkpoint{} over {} layers ({} segments, the last not recomputed), kept on the "
      "{}{}",
      o.checkpoints, o.checkpoints == 1 ? "" : "s", num_layers, o.checkpoints + 1,
      o.cpu_checkpointing ? "host (cpu_checkpointing)" : "device", o.contiguous ? " in one contiguous buffer" : "");
  if (o.partition_activations)
    out += "; partition_activations: no-op (it splits across the model-parallel group, and dscpp's is 1 rank)";
  if (o.synchronize) out += "; synchronize_checkpoint_boundary on";
  if (o.profile) out += "; profile on (at steps_per_print)";
  return out;
}

ActivationLayout make_activation_layout(const std::vector<LayerDecl>& layers, const CheckpointingOptions& o,
                                        int64_t micro_batch, int64_t element_bytes) {
  ActivationLayout a;
  const int n = static_cast<int>(layers.size());
  const int segments = o.enabled ? static_cast<int>(o.checkpoints) + 1 : 1;
  DSCPP_CHECK(segments >= 1 && segments <= std::max(n, 1));
  for (int s = 0; s <= segments; ++s)
    a.segment_begin.push_back(static_cast<int>(static_cast<int64_t>(s) * n / segments));
  a.segment_of.resize(static_cast<size_t>(n));
  a.output_at.resize(static_cast<size_t>(n));
  a.saved_at.resize(static_cast<size_t>(n));
  a.checkpoint_bytes.assign(static_cast<size_t>(segments), 0);
  a.checkpoint_at.assign(static_cast<size_t>(segments), 0);
  a.checkpoints_on_host = o.enabled && o.cpu_checkpointing;
  a.contiguous = o.enabled && o.contiguous;
  int64_t max_out = 0, largest_checkpoint = 0, separate_total = 0;
  for (int s = 0; s < segments; ++s) {
    int64_t at = 0;  // every segment starts at the arena's base: they are never live together
    for (int l = a.segment_begin[static_cast<size_t>(s)]; l < a.segment_begin[static_cast<size_t>(s) + 1]; ++l) {
      const LayerDecl& d = layers[static_cast<size_t>(l)];
      a.segment_of[static_cast<size_t>(l)] = s;
      a.output_at[static_cast<size_t>(l)] = at;
      at += aligned(micro_batch * d.output_numel * element_bytes) + kGuardBytes;
      a.saved_at[static_cast<size_t>(l)] = at;
      at += aligned(micro_batch * d.saved_bytes) + kGuardBytes;
      max_out = std::max(max_out, d.output_numel);
    }
    a.arena_bytes = std::max(a.arena_bytes, at);
    if (s == 0) continue;
    const int64_t bytes =
        micro_batch * layers[static_cast<size_t>(a.segment_begin[static_cast<size_t>(s)]) - 1].output_numel *
        element_bytes;
    a.checkpoint_bytes[static_cast<size_t>(s)] = bytes;
    a.checkpoint_at[static_cast<size_t>(s)] = a.contiguous ? a.checkpoint_total : 0;
    if (a.contiguous) a.checkpoint_total += aligned(bytes);
    separate_total += bytes;
    largest_checkpoint = std::max(largest_checkpoint, bytes);
  }
  if (!a.contiguous) a.checkpoint_total = separate_total;
  if (a.checkpoints_on_host) a.staging_bytes = largest_checkpoint;
  a.grad_bytes = 2 * (micro_batch * max_out * element_bytes + kGuardBytes);
  return a;
}

}  // namespace dscpp::runtime
