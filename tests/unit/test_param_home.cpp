// ParamHome (where stage-3 parameter slices live) and ParamSwap (the NVMe part): DeepSpeed's
// placement rules (the swap minimum, max_in_cpu), exact round trips through host
// memory and through a swap file with fewer buffers than slices (every slice written back and
// read again), prefetch that never takes the last buffer, and the errors that name their key.
#include "core/dtype.h"
#include "core/error.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/offload/param_home.h"
#include "tests/unit/offload_fixture.h"

#include <catch2/catch.hpp>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::runtime;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using dscpp::test::TempDir;

// One parameter per layer of the given sizes, partitioned over `parts` ranks (stage 3).
FlatLayout layout_of(const std::vector<int64_t>& sizes, int parts) {
  std::vector<LayerDecl> layers;
  for (size_t i = 0; i < sizes.size(); ++i) {
    LayerDecl l;
    l.name = "l" + std::to_string(i);
    l.params.push_back(ParamDecl{l.name + ".w", {sizes[i]}, sizes[i]});
    layers.push_back(l);
  }
  Grouping g;
  g.parts = parts;
  g.layer_per_group = true;
  return make_flat_layout(layers, g);
}

ParamOffloadPlan nvme(const std::string& path, int64_t buffers) {
  ParamOffloadPlan o;
  o.device = OffloadDevice::nvme;
  o.nvme_path = path;
  o.buffer_count = buffers;
  o.max_in_cpu = 0;
  return o;
}

// A value per (group, element) that bf16 holds exactly (small integers).
float value(int group, int64_t i) {
  return static_cast<float>((group * 37 + i) % 251) - 125.0f;
}

void fill(ParamHome& home, const FlatLayout& l, int group) {
  std::vector<float> v(static_cast<size_t>(l.groups[static_cast<size_t>(group)].part));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(group, static_cast<int64_t>(i));
  home.write_f32(group, 0, static_cast<int64_t>(v.size()), v.data());
}

int64_t mismatches(ParamHome& home, const FlatLayout& l, int group) {
  std::vector<float> v(static_cast<size_t>(l.groups[static_cast<size_t>(group)].part));
  home.read_f32(group, 0, static_cast<int64_t>(v.size()), v.data());
  int64_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) bad += v[i] != value(group, static_cast<int64_t>(i));
  return bad;
}

}  // namespace

TEST_CASE("placement: swap minimum max(1 MiB, block_size), then max_in_cpu in group order", "[param_home]") {
  // fp32 over 2 ranks (slice bytes = 2 × layer elements): slices of 0.5 MiB (below the minimum:
  // stays in host memory), 1 MiB, 2 MiB, 1 MiB.
  const int64_t mib = 1 << 20;
  FlatLayout l = layout_of({mib / 4, mib / 2, mib, mib / 2}, 2);
  ParamOffloadPlan o = nvme("/unused", 2);
  ParamHome::Placement p = ParamHome::place(l, DType::f32, o);
  using W = ParamHome::Where;
  CHECK(p.where == std::vector<W>{W::host, W::nvme, W::nvme, W::nvme});
  CHECK(p.largest_swapped == mib / 2);  // elements of the 2 MiB slice
  // max_in_cpu keeps the first swappable slices that fit in host memory.
  o.max_in_cpu = mib / 4 + 100;  // the 1 MiB slice (262144 elements) fits, then neither the 2 MiB nor the last
  p = ParamHome::place(l, DType::f32, o);
  CHECK(p.where == std::vector<W>{W::host, W::host, W::nvme, W::nvme});
  CHECK(p.slots == 2);
  // A larger aio block raises the minimum: 2 MiB leaves only the 2 MiB slice swappable.
  o.max_in_cpu = 0;
  o.aio.block_size = 2 * mib;
  p = ParamHome::place(l, DType::f32, o);
  CHECK(p.where == std::vector<W>{W::host, W::host, W::nvme, W::host});
  // cpu: everything in host memory, in order.
  o.device = OffloadDevice::cpu;
  p = ParamHome::place(l, DType::f32, o);
  CHECK(p.where == std::vector<W>(4, W::host));
  CHECK(p.host_elements == l.part_total);
}

TEST_CASE("offload_param cpu: slices live on the host device, exact round trip in bf16", "[param_home]") {
  auto device = make_cpu_device();
  auto host = make_host_device();
  FlatLayout l = layout_of({1000, 37, 4096}, 2);
  ParamOffloadPlan o;
  o.device = OffloadDevice::cpu;
  ParamHome home(l, 1, *device, *host, DType::bf16, true, o);
  CHECK(device->stats().total_current == 0);
  CHECK(host->stats().current[static_cast<size_t>(MemCategory::params)] == l.part_total * 2);
  for (int g = 0; g < 3; ++g) {
    CHECK(home.on_device(g) == nullptr);
    fill(home, l, g);
  }
  for (int g = 0; g < 3; ++g) CHECK(mismatches(home, l, g) == 0);
  // copy_to_device hands over the stored bytes.
  std::vector<uint16_t> out(static_cast<size_t>(l.groups[2].part));
  home.copy_to_device(2, out.data());
  std::vector<float> back(out.size());
  convert(out.data(), DType::bf16, back.data(), DType::f32, back.size());
  int64_t bad = 0;
  for (size_t i = 0; i < back.size(); ++i) bad += back[i] != value(2, static_cast<int64_t>(i));
  CHECK(bad == 0);
}

TEST_CASE("offload_param nvme: more slices than buffers, every slice written back and read again", "[param_home]") {
  TempDir dir;
  auto device = make_cpu_device();
  auto host = make_host_device();
  const int64_t n = (int64_t{1} << 18) + 16;  // each rank's fp32 slice: n elements, just over 1 MiB
  FlatLayout l = layout_of({2 * n, 2 * n, 2 * n, 2 * n, 2 * n}, 2);
  ParamHome home(l, 0, *device, *host, DType::f32, true, nvme(dir.path, 2));
  for (int g = 0; g < 5; ++g) REQUIRE(home.where(g) == ParamHome::Where::nvme);
  CHECK(home.nvme_bytes() == 5 * l.groups[0].part * 4);
  for (int g = 0; g < 5; ++g) fill(home, l, g);  // 5 write-backs through 2 buffers
  for (int g = 4; g >= 0; --g) CHECK(mismatches(home, l, g) == 0);
  // Partial writes read the slice first: the untouched elements survive.
  std::vector<float> patch(10, 1000.0f);
  home.write_f32(3, 100, 10, patch.data());
  std::vector<float> v(static_cast<size_t>(l.groups[3].part));
  home.read_f32(3, 0, static_cast<int64_t>(v.size()), v.data());
  CHECK(v[99] == value(3, 99));
  CHECK(v[100] == 1000.0f);
  CHECK(v[110] == value(3, 110));
  for (int64_t i = 100; i < 110; ++i) v[static_cast<size_t>(i)] = value(3, i);
  home.write_f32(3, 100, 10, v.data() + 100);  // undone, for the checks below
  // Prefetch takes every buffer but one, then declines; the prefetched slices read back exactly.
  home.flush();
  CHECK(home.prefetch(0));
  CHECK_FALSE(home.prefetch(1));
  for (int g = 0; g < 5; ++g) CHECK(mismatches(home, l, g) == 0);
  // Two slices open at once need two buffers; a third is refused, naming the key.
  {
    ParamHome::Access a = home.open(0, false);
    ParamHome::Access b = home.open(1, false);
    CHECK_THROWS_WITH(home.open(2, false), Contains("offload_param.buffer_count"));
  }
  CHECK(mismatches(home, l, 2) == 0);  // and the refusal left nothing behind
}

TEST_CASE("offload_param nvme: errors name the key and the path", "[param_home]") {
  TempDir dir;
  auto device = make_cpu_device();
  auto host = make_host_device();
  const int64_t n = int64_t{1} << 20;  // 2 MiB fp32 slices over 2 ranks
  FlatLayout l = layout_of({n, n}, 2);
  ParamOffloadPlan o = nvme(dir.path + "/missing", 2);
  CHECK_THROWS_WITH(ParamHome(l, 0, *device, *host, DType::f32, true, o),
                    Contains("zero_optimization.offload_param") && Contains(dir.path + "/missing") &&
                        Contains("does not exist"));
  o = nvme(dir.path, 2);
  o.buffer_size = n / 4;
  CHECK_THROWS_WITH(ParamHome(l, 0, *device, *host, DType::f32, true, o),
                    Contains("offload_param.buffer_size") && Contains(std::to_string(n / 2)));
  o = nvme(dir.path, 0);
  CHECK_THROWS_WITH(ParamHome(l, 0, *device, *host, DType::f32, true, o), Contains("offload_param.buffer_count"));
}
