// The partition layout as a checkpoint records it, and the arithmetic that says where each
// element of a parameter lives under it.
//
// This is the plugin-independent description of runtime/model/flat_layout.h (the engine converts
// its FlatLayout into one; a checkpoint's manifest stores one):
//
//   every parameter p occupies flat elements [p.offset, p.offset + p.numel) and lies inside
//   exactly one group; group g covers [begin, begin + numel); rank r owns
//   [begin + r·part, begin + (r+1)·part) of it; a rank's partitions, concatenated, hold group
//   g's slice at [part_offset, part_offset + part).
//
// With parts = 1 (stage 0) rank 0 owns everything. Alignment gaps between parameters and the
// padding at a group's end belong to no parameter: they are never read or written through a
// Fragment, so loading with another layout leaves them as the new layout's initialisation
// made them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::ckpt {

struct ParamDesc {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;  // flat element offset
};

struct GroupDesc {
  int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
  int64_t begin = 0;                   // flat offset of the group's first element
  int64_t numel = 0;                   // padded length = parts · part
  int64_t part = 0;                    // elements each rank owns
  int64_t part_offset = 0;             // where its slice sits in a rank's concatenated partitions
};

struct PartitionLayout {
  int parts = 1;
  int64_t total = 0;       // flat elements incl. alignment and padding
  int64_t part_total = 0;  // Σ part: the length of one rank's concatenated partitions
  std::vector<ParamDesc> params;
  std::vector<GroupDesc> groups;
};

// A piece of a parameter held by one rank: parameter elements [param_first, param_first +
// count) are that rank's concatenated-partition elements [part_at, part_at + count).
struct Fragment {
  int rank = 0;
  int group = 0;
  int64_t param_first = 0;
  int64_t count = 0;
  int64_t part_at = 0;
};

// The fragments holding elements [first, first + count) of parameter `param` (an index into
// layout.params), in element order; they tile the range exactly. Throws dscpp::Error when
// the range lies outside the parameter or the parameter outside every group.
std::vector<Fragment> fragments(const PartitionLayout& layout, size_t param, int64_t first, int64_t count);

// The fragments of `param` that `rank` owns. With layout.parts == 1 (stage 0) every rank
// holds the whole model, so every fragment is returned whatever `rank` is.
std::vector<Fragment> owned_fragments(const PartitionLayout& layout, size_t param, int rank);

// A run of a rank's concatenated partitions that lies in one group: elements
// [part_at, part_at + count) are [offset, offset + count) of group `group`'s slice.
struct GroupSpan {
  int group = 0;
  int64_t offset = 0;
  int64_t count = 0;
  int64_t part_at = 0;
};
// The group spans tiling [first, first + count) of a rank's concatenated partitions.
std::vector<GroupSpan> group_spans(const PartitionLayout& layout, int64_t first, int64_t count);

// Checks what the arithmetic above relies on: groups tile [0, total) in order with numel =
// parts · part and consecutive part_offsets summing to part_total; every parameter lies
// inside one group; parameters do not overlap. Throws dscpp::Error starting with `where`.
void validate(const PartitionLayout& layout, const std::string& where);

// Index of the parameter named `name`, or -1.
int64_t find_param(const PartitionLayout& layout, const std::string& name);

}  // namespace dscpp::ckpt
