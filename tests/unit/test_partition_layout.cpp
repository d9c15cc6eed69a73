// Fragment arithmetic: which rank, at which offset of its concatenated partitions, holds
// elements [a, b) of a parameter. Checked element by element against the closed-form owner
// of every flat element (rank = (e − begin) / part, position = part_offset + (e − begin) mod
// part) over odd parameter sizes, empty layers and 1..5 parts.
#include "checkpoint/partition_layout.h"
#include "core/error.h"
#include "tests/unit/layout_fixture.h"

#include <catch2/catch.hpp>

#include <numeric>

using namespace dscpp;
using namespace dscpp::ckpt;
using namespace dscpp::ckpt::test;

namespace {

struct Owner {
  int rank;
  int64_t part_at;
};
Owner owner_of(const PartitionLayout& l, int64_t flat) {
  for (const GroupDesc& g : l.groups)
    if (flat >= g.begin && flat < g.begin + g.numel)
      return {static_cast<int>((flat - g.begin) / g.part), g.part_offset + (flat - g.begin) % g.part};
  FAIL("flat element " << flat << " in no group");
  return {};
}

// fragments() for [first, first+count) must tile the range in order, each element where
// the closed form says.
void check_range(const PartitionLayout& l, size_t p, int64_t first, int64_t count) {
  std::vector<Fragment> fs = fragments(l, p, first, count);
  int64_t next = first;
  for (const Fragment& f : fs) {
    REQUIRE(f.param_first == next);
    REQUIRE(f.count > 0);
    for (int64_t k = 0; k < f.count; ++k) {
      Owner o = owner_of(l, l.params[p].offset + f.param_first + k);
      REQUIRE(o.rank == f.rank);
      REQUIRE(o.part_at == f.part_at + k);
    }
    next += f.count;
  }
  REQUIRE(next == first + count);
}

}  // namespace

TEST_CASE("fragments match the per-element owner for every parameter, range and part count") {
  for (int parts = 1; parts <= 5; ++parts) {
    PartitionLayout l = make_layout(parts, kOddModel);
    validate(l, "test layout");
    for (size_t p = 0; p < l.params.size(); ++p) {
      const int64_t n = l.params[p].numel;
      check_range(l, p, 0, n);
      for (int64_t first : {int64_t{0}, int64_t{1}, n / 3, n / 2, n - 1})
        for (int64_t count : {int64_t{1}, int64_t{17}, n / 2 + 1, n})
          if (first >= 0 && first + count <= n && count > 0) check_range(l, p, first, count);
      CHECK(fragments(l, p, n, 0).empty());
    }
  }
}

TEST_CASE("a parameter across a rank boundary splits into one fragment per rank") {
  // One group of 1003 + 7 → 1008 + 16 = 1024 padded to a multiple of 64 (4 parts): part 256.
  PartitionLayout l = make_layout(4, {{1003, 7}});
  REQUIRE(l.groups[0].part == 256);
  std::vector<Fragment> fs = fragments(l, 0, 0, 1003);
  REQUIRE(fs.size() == 4);
  CHECK(fs[0].rank == 0);
  CHECK(fs[0].count == 256);
  CHECK(fs[3].rank == 3);
  CHECK(fs[3].param_first == 768);
  CHECK(fs[3].count == 1003 - 768);
  CHECK(fs[3].part_at == 0);
  // p1 (7 elements at flat 1008) lies wholly in rank 3's slice, at 1008 − 768 = 240.
  std::vector<Fragment> f1 = fragments(l, 1, 0, 7);
  REQUIRE(f1.size() == 1);
  CHECK(f1[0].rank == 3);
  CHECK(f1[0].part_at == 240);
}

TEST_CASE("owned fragments of all ranks tile every parameter; stage 0 owns everything") {
  for (int parts : {1, 2, 3, 4}) {
    PartitionLayout l = make_layout(parts, kOddModel);
    for (size_t p = 0; p < l.params.size(); ++p) {
      int64_t covered = 0;
      for (int r = 0; r < parts; ++r)
        for (const Fragment& f : owned_fragments(l, p, r)) {
          CHECK((parts == 1 || f.rank == r));
          covered += f.count;
        }
      CHECK(covered == l.params[p].numel);
    }
  }
  PartitionLayout one = make_layout(1, kOddModel);
  // With one part every rank holds the whole model: rank 5 of a stage-0 world gets it all.
  CHECK(owned_fragments(one, 2, 5).size() == 1);
  CHECK(owned_fragments(one, 2, 5)[0].count == 4097);
}

TEST_CASE("group spans map a rank's concatenated partitions back to groups") {
  PartitionLayout l = make_layout(3, kOddModel);
  // The whole of a rank's partitions: one span per non-empty group, in order, tiling.
  std::vector<GroupSpan> all = group_spans(l, 0, l.part_total);
  int64_t at = 0;
  for (const GroupSpan& s : all) {
    CHECK(s.part_at == at);
    CHECK(s.offset == 0);
    CHECK(s.count == l.groups[static_cast<size_t>(s.group)].part);
    CHECK(l.groups[static_cast<size_t>(s.group)].part_offset == s.part_at);
    at += s.count;
  }
  CHECK(at == l.part_total);
  CHECK(all.size() == 4);  // the two empty layers have no slice
  // A range across the boundary of groups 2 and 3.
  const GroupDesc& g2 = l.groups[2];
  std::vector<GroupSpan> cut = group_spans(l, g2.part_offset + g2.part - 5, 10);
  REQUIRE(cut.size() == 2);
  CHECK(cut[0].group == 2);
  CHECK(cut[0].offset == g2.part - 5);
  CHECK(cut[0].count == 5);
  CHECK(cut[1].group == 3);
  CHECK(cut[1].offset == 0);
  CHECK(cut[1].count == 5);
  CHECK_THROWS_WITH(group_spans(l, l.part_total - 1, 2), Catch::Contains("outside a rank's"));
}

TEST_CASE("bad ranges and broken layouts are refused with the parameter or group named") {
  PartitionLayout l = make_layout(2, kOddModel);
  CHECK_THROWS_WITH(fragments(l, 0, 1000, 10), Catch::Contains("[1000, 1010) lie outside parameter 'p0' (1003"));
  CHECK_THROWS_WITH(fragments(l, 99, 0, 1), Catch::Contains("no parameter 99"));

  PartitionLayout gap = l;
  gap.groups[2].begin += 16;
  CHECK_THROWS_WITH(validate(gap, "m.json: layout"), Catch::Contains("m.json: layout: partition group 2"));
  PartitionLayout offset = l;
  offset.groups[3].part_offset += 1;
  CHECK_THROWS_WITH(validate(offset, "x"), Catch::Contains("partition group 3"));
  PartitionLayout overlap = l;
  overlap.params[1].offset = overlap.params[0].offset + 16;
  CHECK_THROWS_WITH(validate(overlap, "x"), Catch::Contains("parameter 'p1'") && Catch::Contains("overlaps"));
  PartitionLayout straddle = l;
  straddle.params[1].offset = l.groups[0].begin + l.groups[0].numel - 3;  // runs into group 2
  CHECK_THROWS_WITH(validate(straddle, "x"), Catch::Contains("parameter 'p1'"));
  PartitionLayout total = l;
  total.total += 64;
  CHECK_THROWS_WITH(validate(total, "x"), Catch::Contains("the layout says total"));
}

TEST_CASE("find_param") {
  PartitionLayout l = make_layout(2, kOddModel);
  CHECK(find_param(l, "p3") == 3);
  CHECK(find_param(l, "nope") == -1);
}
