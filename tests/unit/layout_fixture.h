// Partition layouts for the checkpoint tests, built the way the engine builds them
// (runtime/model/flat_layout.cpp): parameters 16-aligned, each group padded to a multiple of
// parts·16, groups' slices concatenated in order.
#pragma once

#include "checkpoint/partition_layout.h"

#include <string>
#include <vector>

namespace dscpp::ckpt::test {

inline int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

// `groups` lists each group's parameter sizes (parameters "p0", "p1", ... in order); an
// empty list is a layer without parameters (an empty group, as stage 3 makes one).
inline PartitionLayout make_layout(int parts, const std::vector<std::vector<int64_t>>& groups) {
  PartitionLayout l;
  l.parts = parts;
  int64_t at = 0;
  int layer = 0;
  for (const auto& sizes : groups) {
    GroupDesc g;
    g.first_layer = layer;
    g.end_layer = ++layer;
    g.begin = at;
    for (int64_t n : sizes) {
      l.params.push_back(ParamDesc{"p" + std::to_string(l.params.size()), {n}, n, at});
      at += round_up(n, 16);
    }
    g.numel = round_up(at - g.begin, 16 * parts);
    g.part = g.numel / parts;
    g.part_offset = l.part_total;
    l.part_total += g.part;
    at = g.begin + g.numel;
    l.groups.push_back(g);
  }
  l.total = at;
  return l;
}

// Odd sizes on purpose: nothing divides by the rank counts or the alignment; two layers
// without parameters.
inline const std::vector<std::vector<int64_t>> kOddModel = {{1003, 7}, {}, {4097, 33, 1}, {4097, 33, 1}, {517}, {}};

}  // namespace dscpp::ckpt::test
