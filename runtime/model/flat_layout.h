// The flat parameter layout every ZeRO stage shares.
//
// All parameters of the model form one flat array in declaration order, each starting on a
// 64-byte boundary. Consecutive layers are cut into partition groups: a group is the unit that
// is reduced (allreduce or reduce-scatter), partitioned across ranks and gathered. A group's
// padded length is a multiple of parts·16 elements, so every rank owns one equal, 64-byte
// aligned slice of it:
//
//   group g: [begin, begin + numel)      rank r owns [begin + r·part, begin + (r+1)·part)
//   a rank's partitions, concatenated:   group g's slice at [part_offset, part_offset + part)
//
// Stage 0 is the degenerate case (parts = 1: the rank owns everything). Stages 1 and 2 group
// layers up to the smaller of reduce_bucket_size and allgather_bucket_size elements (a group is
// one reduce-scatter, launched as soon as its backward is done, and one allgather) and to
// 1/kModelGroups of the model; stage 3 makes every layer its own group (gathered before the
// layer runs, released after). Every slice boundary follows from (layer parameter counts,
// parts, grouping), which the checkpoint manifest records, so another world size can reshard.
#pragma once

#include "runtime/model/plugin.h"
#include "runtime/plans.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace dscpp::runtime {

inline constexpr int64_t kFlatAlign = 16;  // elements: 64 bytes of fp32

struct ParamSlot {
  std::string name;  // "<layer>.<param>"
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int layer = 0;
  int index = 0;       // the layer's ctx.params slot (LayerDecl/ParamDecl::slot)
  int64_t offset = 0;  // elements from the start of the flat array
  dscpp_init_kind init = DSCPP_INIT_ZEROS;
  float init_a = 0;
  dscpp_param_role role = DSCPP_ROLE_WEIGHT;
  bool adapter = false;  // ParamDecl::adapter
};

struct PartitionGroup {
  int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
  int64_t begin = 0;                   // flat offset of the group's first element
  int64_t numel = 0;                   // padded length = parts · part (0 for a layer without parameters)
  int64_t part = 0;                    // elements each rank owns
  int64_t part_offset = 0;             // offset of this group's slice in a rank's concatenated partitions
  int64_t owned_begin(int rank) const { return begin + rank * part; }
};

struct Grouping {
  int parts = 1;                                               // ranks the groups are partitioned over
  int64_t max_group_elements = std::numeric_limits<int64_t>::max();  // close a group before it exceeds this
  // Also close a group before it exceeds 1/model_fraction of the model's elements (0: no such
  // bound); a layer larger than that still is one group.
  int64_t model_fraction = 0;
  bool layer_per_group = false;                                // stage 3: every layer is a group
};

// Stages 1–2 cut the model into at least this many groups where its layers allow: a group's
// gradients are staged whole for its reduce-scatter, so with DeepSpeed's default buckets (5e8
// elements, more than most models) one group would stage the whole model and the buffers would
// grow by what partitioning saves. 1/16 of the model keeps that staging under ~2% of stage 0's
// fp32 Adam model states (16 bytes per parameter) per staged group.
inline constexpr int64_t kModelGroups = 16;

// How a ZeRO plan groups the layout over `world_size` ranks: one part per rank once anything is
// partitioned; at stage 3 a group per layer (gathered as one); at stages 1-2 groups bounded by
// both bucket sizes and by 1/kModelGroups of the model (a group is one reduce-scatter and one
// allgather).
Grouping grouping_for(const ZeroPlan& zero, int world_size);

struct FlatLayout {
  std::vector<ParamSlot> params;
  std::vector<std::pair<int64_t, int64_t>> layer_range;  // [begin, end) of each layer's params
  std::vector<PartitionGroup> groups;
  std::vector<int> layer_group;  // the group of each layer
  int parts = 1;
  int64_t total = 0;       // elements incl. alignment and group padding
  int64_t numel = 0;       // real parameter elements
  int64_t part_total = 0;  // Σ group part: the length of one rank's concatenated partitions
  int64_t max_group_numel = 0;
  int64_t max_layer_numel = 0;  // padded, for per-layer scratch buffers
};

// Which parameters a layout holds: all of them, or the trainable or the frozen ones
// (runtime/model/frozen_params.h): a run with frozen parameters has one layout of each, with the
// same layers and grouping rule, so a stage-3 layer is gathered from both.
enum class ParamSet { all, trainable, frozen };
bool in_set(const ParamDecl& p, ParamSet set);

FlatLayout make_flat_layout(const std::vector<LayerDecl>& layers, const Grouping& grouping = {},
                            ParamSet set = ParamSet::all);

}  // namespace dscpp::runtime
