// ParamStore in one process, threads as ranks over the shared-memory backend. Each rank writes
// only the slices it owns, with values that are a function of the flat element, and every way a
// layer can see its parameters must show the whole model's values exactly: stage 3's gathers
// in forward and backward under tight prefetch and live-parameter limits, with and without
// persistent groups, with hpZ's secondary copies; stage 1-2's publish (an allgather in place).
// And the live elements never exceed the bound the memory plan uses (gathered_bound).
#include "collectives/backend.h"
#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/zero/param_store.h"
#include "tests/unit/layer_decls.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::runtime;

namespace {

std::vector<LayerDecl> store_layers() {
  std::vector<LayerDecl> out;
  for (int64_t n : {300, 17, 4000, 64, 1000, 8})
    out.push_back(dscpp::test::layer_decl("l" + std::to_string(out.size()), {n}));
  return out;
}

float value(int64_t e) { return static_cast<float>(e % 1021) * 0.5f + 1.0f; }  // exact in fp32

// Catch2's assertions are not thread-safe: the rank threads note what went wrong here, one list
// per rank, and the test case checks the lists after the threads are joined.
using Problems = std::vector<std::vector<std::string>>;

// Notes where the layer's parameters, as the store hands them over, differ from value(e).
void check_layer(const FlatLayout& layout, Device& device, const void* params, int layer,
                 std::vector<std::string>& problems) {
  auto [first, end] = layout.layer_range[static_cast<size_t>(layer)];
  for (const ParamSlot& s : layout.params) {
    if (s.layer != layer) continue;
    std::vector<float> got(static_cast<size_t>(s.numel));
    device.copy_to_host(got.data(), static_cast<const float*>(params) + (s.offset - first), got.size() * 4);
    for (int64_t i = 0; i < s.numel; ++i)
      if (got[static_cast<size_t>(i)] != value(s.offset + i)) {
        problems.push_back("layer " + std::to_string(layer) + " element " + std::to_string(s.offset + i) + ": " +
                           std::to_string(got[static_cast<size_t>(i)]) + " instead of " +
                           std::to_string(value(s.offset + i)));
        return;
      }
  }
}

void check_none(const Problems& problems) {
  for (size_t r = 0; r < problems.size(); ++r)
    for (const std::string& p : problems[r]) FAIL_CHECK("rank " << r << ": " << p);
}

// Stage 3 on `world` ranks: owned slices written, then two steps of a forward and a backward
// pass; every layer's parameters checked, and the live elements against the bound.
void stage3(int world, const Stage3Plan& s3) {
  CAPTURE(world, s3.prefetch_bucket_size, s3.max_live_parameters, s3.param_persistence_threshold,
          s3.hpz_partition_size);
  Grouping g;
  g.parts = world;
  g.layer_per_group = true;
  const FlatLayout layout = make_flat_layout(store_layers(), g);
  const int64_t bound = ParamStore::gathered_bound(layout, s3) + ParamStore::hpz_secondary_bound(layout, s3);
  Problems problems(static_cast<size_t>(world));
  std::vector<int> uses(static_cast<size_t>(world), 0);
  test::run_thread_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    std::vector<std::string>& noted = problems[static_cast<size_t>(rank)];
    comm::GroupContext c = test::group_context(store, "params", rank, size);
    comm::Communicator comm(c, comm::make_shm_backend(c));
    auto device = make_cpu_device();
    ParamStore ps(layout, comm, *device, DType::f32, true, s3);
    auto use = [&](int l, bool backward) {
      check_layer(layout, *device, ps.layer_params(l, backward), l, noted);
      if (ps.gathered_elements() > bound)
        noted.push_back("layer " + std::to_string(l) + ": " + std::to_string(ps.gathered_elements()) +
                        " elements gathered, over the bound " + std::to_string(bound));
      ps.layer_done(l, backward);
      ++uses[static_cast<size_t>(rank)];
    };
    for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
      const PartitionGroup& grp = layout.groups[gi];
      std::vector<float> mine(static_cast<size_t>(grp.part));
      for (int64_t i = 0; i < grp.part; ++i) mine[static_cast<size_t>(i)] = value(grp.owned_begin(rank) + i);
      ps.home().write_from_host(static_cast<int>(gi), 0, grp.part, mine.data());
    }
    ps.publish();
    const int n = static_cast<int>(layout.layer_range.size());
    for (int step = 0; step < 2; ++step) {
      ps.begin_pass(false, true);
      for (int l = 0; l < n; ++l) use(l, false);
      ps.begin_pass(true, true);
      for (int l = n - 1; l >= 0; --l) use(l, true);
      ps.publish();  // as after an optimizer step
    }
    ps.release_all();
  });
  check_none(problems);
  for (int u : uses) CHECK(u == 2 * 2 * static_cast<int>(store_layers().size()));  // 2 steps, forward and backward
}

}  // namespace

TEST_CASE("stage 3 gathers every layer's whole parameters in forward and backward", "[param_store]") {
  Stage3Plan defaults;
  for (int world : {1, 2, 3}) stage3(world, defaults);
  Stage3Plan tight;  // one group in flight, few live elements, nothing persistent or reused
  tight.prefetch_bucket_size = 1;
  tight.max_live_parameters = 1;
  tight.max_reuse_distance = 0;
  tight.param_persistence_threshold = 0;
  for (int world : {2, 4}) stage3(world, tight);
  Stage3Plan persistent;  // the small layers stay gathered
  persistent.param_persistence_threshold = 100;
  stage3(3, persistent);
}

TEST_CASE("hpZ's secondary copies give backward the forward's parameters", "[param_store]") {
  Stage3Plan hpz;
  hpz.hpz_partition_size = 2;
  hpz.max_reuse_distance = 0;  // every group is gathered again in backward, from the copies
  hpz.param_persistence_threshold = 0;
  stage3(4, hpz);
}

TEST_CASE("stages 1-2: publish allgathers each rank's updated slice into every rank's array", "[param_store]") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    Grouping g;
    g.parts = world;
    g.max_group_elements = 2000;
    const FlatLayout layout = make_flat_layout(store_layers(), g);
    Problems problems(static_cast<size_t>(world));
    test::run_thread_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      comm::GroupContext c = test::group_context(store, "params12", rank, size);
      comm::Communicator comm(c, comm::make_shm_backend(c));
      auto device = make_cpu_device();
      ParamStore ps(layout, comm, *device, DType::f32, false);
      // Each rank writes its own slices only (as its optimizer step does), the rest stays 0.
      auto* full = static_cast<float*>(ps.full());
      std::vector<float> zeros(static_cast<size_t>(layout.total), 0.0f);
      device->copy_from_host(full, zeros.data(), zeros.size() * 4);
      for (const PartitionGroup& grp : layout.groups) {
        std::vector<float> mine(static_cast<size_t>(grp.part));
        for (int64_t i = 0; i < grp.part; ++i) mine[static_cast<size_t>(i)] = value(grp.owned_begin(rank) + i);
        device->copy_from_host(full + grp.owned_begin(rank), mine.data(), mine.size() * 4);
      }
      ps.publish();
      ps.begin_pass(false, true);
      for (int l = 0; l < static_cast<int>(layout.layer_range.size()); ++l) {
        check_layer(layout, *device, ps.layer_params(l, false), l, problems[static_cast<size_t>(rank)]);
        ps.layer_done(l, false);
      }
    });
    check_none(problems);
  }
}
