// The flat layout's partition arithmetic: groups tile the array, every rank's slice is equal
// and 64-byte aligned, and the slices of all ranks reassemble every parameter exactly.
#include "runtime/model/flat_layout.h"
#include "tests/unit/layer_decls.h"

#include <catch2/catch.hpp>

#include <numeric>

using namespace dscpp::runtime;

namespace {

constexpr auto layer = dscpp::test::layer_decl;

// Odd sizes on purpose: nothing divides by the rank counts or the alignment.
std::vector<LayerDecl> model() {
  return {layer("embed", {1003, 7}), layer("act", {}), layer("block0", {4097, 33, 1}), layer("block1", {4097, 33, 1}),
          layer("head", {517})};
}

void check_invariants(const FlatLayout& f, const std::vector<LayerDecl>& layers) {
  int64_t at = 0, part_at = 0, numel = 0;
  for (const PartitionGroup& g : f.groups) {
    CHECK(g.begin == at);
    CHECK(g.numel % (f.parts * kFlatAlign) == 0);
    CHECK(g.part * f.parts == g.numel);
    CHECK(g.part % kFlatAlign == 0);
    CHECK(g.part_offset == part_at);
    at += g.numel;
    part_at += g.part;
  }
  CHECK(f.total == at);
  CHECK(f.part_total == part_at);
  for (size_t l = 0; l < layers.size(); ++l) {
    const PartitionGroup& g = f.groups[static_cast<size_t>(f.layer_group[l])];
    CHECK(g.first_layer <= static_cast<int>(l));
    CHECK(static_cast<int>(l) < g.end_layer);
    CHECK(f.layer_range[l].first >= g.begin);
    CHECK(f.layer_range[l].second <= g.begin + g.numel);
  }
  for (const ParamSlot& s : f.params) {
    CHECK(s.offset % kFlatAlign == 0);
    numel += s.numel;
    // Σ over ranks of the parameter's elements inside each rank's slice = numel.
    const PartitionGroup& g = f.groups[static_cast<size_t>(f.layer_group[static_cast<size_t>(s.layer)])];
    int64_t covered = 0;
    for (int r = 0; r < f.parts; ++r) {
      int64_t lo = std::max(g.owned_begin(r), s.offset), hi = std::min(g.owned_begin(r) + g.part, s.offset + s.numel);
      covered += std::max<int64_t>(0, hi - lo);
    }
    CHECK(covered == s.numel);
  }
  CHECK(numel == f.numel);
}

}  // namespace

TEST_CASE("stage 0: one group, the old layout") {
  auto layers = model();
  FlatLayout f = make_flat_layout(layers);
  REQUIRE(f.groups.size() == 1);
  CHECK(f.groups[0].part == f.total);
  CHECK(f.params[0].offset == 0);
  CHECK(f.params[1].offset == 1008);  // 1003 rounded up to 16
  CHECK(f.numel == 1003 + 7 + 2 * (4097 + 33 + 1) + 517);
  check_invariants(f, layers);
}

TEST_CASE("stage 3: a group per layer, partitioned over 1..4 ranks") {
  auto layers = model();
  for (int parts = 1; parts <= 4; ++parts) {
    Grouping g;
    g.parts = parts;
    g.layer_per_group = true;
    FlatLayout f = make_flat_layout(layers, g);
    REQUIRE(f.groups.size() == layers.size());
    CHECK(f.groups[1].numel == 0);  // the layer without parameters
    // block0: 4112 + 48 + 16 = 4176 elements, padded to a multiple of 16·parts.
    int64_t q = 16 * parts;
    CHECK(f.groups[2].numel == (4176 + q - 1) / q * q);
    check_invariants(f, layers);
  }
}

TEST_CASE("stages 1/2: layers grouped up to the bucket size") {
  auto layers = model();
  Grouping g;
  g.parts = 3;
  g.max_group_elements = 5000;
  FlatLayout f = make_flat_layout(layers, g);
  // embed+act (1024) + block0 (4176) > 5000 → block0 starts a group; block1 likewise; head joins it? 4176+528 ≤ 5000.
  REQUIRE(f.groups.size() == 3);
  CHECK(f.groups[0].first_layer == 0);
  CHECK(f.groups[0].end_layer == 2);
  CHECK(f.groups[1].first_layer == 2);
  CHECK(f.groups[2].first_layer == 3);
  CHECK(f.groups[2].end_layer == 5);
  check_invariants(f, layers);
  // A layer bigger than the bucket is a group of its own.
  g.max_group_elements = 100;
  FlatLayout tiny = make_flat_layout(layers, g);
  CHECK(tiny.groups.size() == layers.size());
  check_invariants(tiny, layers);
}

TEST_CASE("stages 1/2 with DeepSpeed's default buckets: groups of at most 1/16 of the model") {
  // 32 equal layers: the default buckets (5e8) would make one group of the whole model.
  std::vector<LayerDecl> layers;
  for (int i = 0; i < 32; ++i) layers.push_back(layer("block" + std::to_string(i), {1000}));
  Grouping g = grouping_for(ZeroPlan::for_stage(2), 2);
  CHECK(g.model_fraction == kModelGroups);
  FlatLayout f = make_flat_layout(layers, g);
  CHECK(f.groups.size() == 16);  // 1008 elements a layer, 2 a group
  CHECK(f.max_group_numel <= (f.total + kModelGroups - 1) / kModelGroups + f.parts * kFlatAlign);
  check_invariants(f, layers);
  // A layer larger than the fraction is a group of its own, and the small ones still share.
  layers[5] = layer("big", {40000});
  FlatLayout big = make_flat_layout(layers, g);
  CHECK(big.groups[static_cast<size_t>(big.layer_group[5])].first_layer == 5);
  CHECK(big.groups[static_cast<size_t>(big.layer_group[5])].end_layer == 6);
  CHECK(big.groups.size() < layers.size());
  check_invariants(big, layers);
  // Stage 0 and stage 3 keep their grouping.
  CHECK(grouping_for(ZeroPlan::for_stage(0), 2).model_fraction == 0);
  CHECK(grouping_for(ZeroPlan::for_stage(3), 2).layer_per_group);
}
