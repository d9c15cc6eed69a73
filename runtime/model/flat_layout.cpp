#include "runtime/model/flat_layout.h"

#include <algorithm>

namespace dscpp::runtime {

bool in_set(const ParamDecl& p, ParamSet set) {
  return set == ParamSet::all || p.frozen == (set == ParamSet::frozen);
}

namespace {
int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

int64_t layer_elements(const LayerDecl& l, ParamSet set) {
  int64_t n = 0;
  for (const ParamDecl& p : l.params)
    if (in_set(p, set)) n += round_up(p.numel, kFlatAlign);
  return n;
}
}  // namespace

Grouping grouping_for(const ZeroPlan& zero, int world_size) {
  Grouping g;
  g.parts = zero.parts(world_size);
  if (zero.parameters_partitioned)
    g.layer_per_group = true;
  else if (zero.optimizer_partitioned) {
    g.max_group_elements = std::min(zero.reduce_bucket_elements, zero.allgather_bucket_elements);
    g.model_fraction = kModelGroups;
  }
  return g;
}

FlatLayout make_flat_layout(const std::vector<LayerDecl>& layers, const Grouping& grouping, ParamSet set) {
  FlatLayout layout;
  layout.parts = std::max(1, grouping.parts);
  int64_t max_group = grouping.max_group_elements;
  if (grouping.model_fraction > 0) {
    int64_t model = 0;
    for (const LayerDecl& l : layers) model += layer_elements(l, set);
    max_group = std::min(max_group, (model + grouping.model_fraction - 1) / grouping.model_fraction);
  }
  const int64_t quantum = kFlatAlign * layout.parts;
  int64_t offset = 0;
  PartitionGroup open;  // the group being filled
  bool have_open = false;
  auto close = [&] {
    if (!have_open) return;
    open.numel = round_up(offset - open.begin, quantum);
    open.part = open.numel / layout.parts;
    open.part_offset = layout.part_total;
    layout.part_total += open.part;
    offset = open.begin + open.numel;
    layout.max_group_numel = std::max(layout.max_group_numel, open.numel);
    layout.groups.push_back(open);
    have_open = false;
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    int64_t size = layer_elements(layers[l], set);
    if (have_open && (grouping.layer_per_group || offset - open.begin + size > max_group)) close();
    if (!have_open) {
      open = PartitionGroup{};
      open.first_layer = static_cast<int>(l);
      open.begin = offset;
      have_open = true;
    }
    open.end_layer = static_cast<int>(l) + 1;
    layout.layer_group.push_back(static_cast<int>(layout.groups.size()));
    int64_t begin = offset;
    for (size_t p = 0; p < layers[l].params.size(); ++p) {
      const ParamDecl& d = layers[l].params[p];
      if (!in_set(d, set)) continue;
      layout.params.push_back(ParamSlot{d.name, d.shape, d.numel, static_cast<int>(l), d.slot, offset, d.init, d.init_a,
                                        d.role, d.adapter});
      offset += round_up(d.numel, kFlatAlign);
      layout.numel += d.numel;
    }
    layout.layer_range.emplace_back(begin, offset);
    layout.max_layer_numel = std::max(layout.max_layer_numel, offset - begin);
  }
  close();
  layout.total = offset;
  return layout;
}

}  // namespace dscpp::runtime
