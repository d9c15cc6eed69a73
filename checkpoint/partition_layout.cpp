#include "checkpoint/partition_layout.h"

#include "core/error.h"

#include <algorithm>

namespace dscpp::ckpt {

namespace {

// The group whose [begin, begin + numel) contains flat element `at`, or -1.
int group_of(const PartitionLayout& layout, int64_t at) {
  auto it = std::upper_bound(layout.groups.begin(), layout.groups.end(), at,
                             [](int64_t x, const GroupDesc& g) { return x < g.begin; });
  if (it == layout.groups.begin()) return -1;
  --it;
  // Empty groups (layers without parameters) share their begin with the next group.
  while (it != layout.groups.begin() && it->numel == 0) --it;
  if (at >= it->begin + it->numel) return -1;
  return static_cast<int>(it - layout.groups.begin());
}

}  // namespace

std::vector<Fragment> fragments(const PartitionLayout& layout, size_t param, int64_t first, int64_t count) {
  if (param >= layout.params.size())
    fail("checkpoint layout: no parameter {} ({} declared)", param, layout.params.size());
  const ParamDesc& p = layout.params[param];
  if (first < 0 || count < 0 || first > p.numel || count > p.numel - first)
    fail("checkpoint layout: elements [{}, {}) lie outside parameter '{}' ({} elements)", first, first + count, p.name,
         p.numel);
  std::vector<Fragment> out;
  if (count == 0) return out;
  int gi = group_of(layout, p.offset);
  if (gi < 0 ||
      p.offset + p.numel > layout.groups[static_cast<size_t>(gi)].begin + layout.groups[static_cast<size_t>(gi)].numel)
    fail("checkpoint layout: parameter '{}' (flat [{}, {})) lies in no partition group", p.name, p.offset,
         p.offset + p.numel);
  const GroupDesc& g = layout.groups[static_cast<size_t>(gi)];
  const int64_t lo = p.offset + first, hi = lo + count;  // flat range
  for (int64_t r = (lo - g.begin) / g.part; r < layout.parts; ++r) {
    const int64_t own_lo = g.begin + r * g.part, own_hi = own_lo + g.part;
    if (own_lo >= hi) break;
    const int64_t a = std::max(lo, own_lo), b = std::min(hi, own_hi);
    out.push_back(Fragment{static_cast<int>(r), gi, a - p.offset, b - a, g.part_offset + (a - own_lo)});
  }
  return out;
}

std::vector<Fragment> owned_fragments(const PartitionLayout& layout, size_t param, int rank) {
  std::vector<Fragment> all = fragments(layout, param, 0, layout.params.at(param).numel);
  if (layout.parts == 1) return all;
  std::erase_if(all, [rank](const Fragment& f) { return f.rank != rank; });
  return all;
}

std::vector<GroupSpan> group_spans(const PartitionLayout& layout, int64_t first, int64_t count) {
  if (first < 0 || count < 0 || first + count > layout.part_total)
    fail("checkpoint layout: partition elements [{}, {}) lie outside a rank's {} elements", first, first + count,
         layout.part_total);
  std::vector<GroupSpan> out;
  const int64_t hi = first + count;
  auto it = std::upper_bound(layout.groups.begin(), layout.groups.end(), first,
                             [](int64_t x, const GroupDesc& g) { return x < g.part_offset; });
  if (it != layout.groups.begin()) --it;
  for (; it != layout.groups.end() && it->part_offset < hi; ++it) {
    const int64_t a = std::max(first, it->part_offset), b = std::min(hi, it->part_offset + it->part);
    if (b > a) out.push_back(GroupSpan{static_cast<int>(it - layout.groups.begin()), a - it->part_offset, b - a, a});
  }
  return out;
}

void validate(const PartitionLayout& layout, const std::string& where) {
  if (layout.parts < 1) fail("{}: parts is {}, must be ≥ 1", where, layout.parts);
  int64_t at = 0, part_at = 0;
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    const GroupDesc& g = layout.groups[i];
    if (g.begin != at || g.numel != g.part * layout.parts || g.part < 0 || g.part_offset != part_at)
      fail(
          "{}: partition group {} (begin {}, numel {}, part {}, part_offset {}) does not follow the previous groups "
          "(expected begin {}, numel = {} · part, part_offset {})",
          where, i, g.begin, g.numel, g.part, g.part_offset, at, layout.parts, part_at);
    at += g.numel;
    part_at += g.part;
  }
  if (at != layout.total || part_at != layout.part_total)
    fail("{}: the groups cover {} elements ({} per rank) but the layout says total {} (part_total {})", where, at,
         part_at, layout.total, layout.part_total);
  int64_t end = 0;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamDesc& p = layout.params[i];
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    if (p.numel < 0 || n != p.numel || p.offset < end)
      fail(
          "{}: parameter '{}' (shape numel {}, numel {}, offset {}) is inconsistent or overlaps the previous one "
          "(which ends at {})",
          where, p.name, n, p.numel, p.offset, end);
    end = p.offset + p.numel;
    if (p.numel == 0) continue;
    int gi = group_of(layout, p.offset);
    if (gi < 0 || end > layout.groups[static_cast<size_t>(gi)].begin + layout.groups[static_cast<size_t>(gi)].numel)
      fail("{}: parameter '{}' (flat [{}, {})) does not lie inside one partition group", where, p.name, p.offset, end);
  }
}

int64_t find_param(const PartitionLayout& layout, const std::string& name) {
  for (size_t i = 0; i < layout.params.size(); ++i)
    if (layout.params[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace dscpp::ckpt
