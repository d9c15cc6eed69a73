// GradReducer in one process, threads as ranks over the shared-memory backend: every ZeRO
// stage's reduction against the arithmetic it must produce, computed here from the inputs.
//
// Each rank's layer gradients are small integers, so every sum is exact in fp32 (and bf16)
// whatever order the stages add in (stage 0 and 1 accumulate the micro-steps locally and reduce
// once, stages 2-3 reduce every micro-step and add into the partition): the results must be
// equal, not close. Stage 0 keeps the mean over the ranks (DeepSpeed's postscale), stages 1-3
// the sum of this rank's slice (the engine folds 1/world into the loss gradient there): so
// stage N's slice / world equals stage 0's same elements, which the last case checks directly.
#include "collectives/backend.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/plans.h"
#include "runtime/zero/grad_reducer.h"
#include "tests/unit/layer_decls.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

using namespace dscpp;
using namespace dscpp::runtime;

namespace {

// Layers of 37, 100 and 5+64 parameters (the last layer has two), and one without any.
std::vector<LayerDecl> reducer_layers() {
  using dscpp::test::layer_decl;
  return {layer_decl("a", {37}), layer_decl("b", {100}), layer_decl("none", {}), layer_decl("c", {5, 64})};
}

// The gradient rank `rank` adds in micro-step `micro` to element i of parameter p (the p-th
// slot of every stage's layout): a small integer.
float grad(int rank, int micro, size_t p, int64_t i) {
  return static_cast<float>((rank + 1) * (micro + 2) + static_cast<int64_t>(p * 3 + i) % 7 - 3);
}

// The flat layout a stage trains with (as the engine groups: layers per reduce bucket at stages
// 1-2, a group per layer at stage 3), with small groups so that several exist.
FlatLayout layout_for(const ZeroPlan& zero, int world) {
  Grouping g;
  g.parts = zero.parts(world);
  if (zero.parameters_partitioned)
    g.layer_per_group = true;
  else if (zero.optimizer_partitioned)
    g.max_group_elements = 128;
  return make_flat_layout(reducer_layers(), g);
}

// Runs one optimizer step of `gas` micro-steps on `world` thread ranks over `layout` (the
// stage's: layout_for); returns each rank's owned gradients, group by group, by flat element index.
std::vector<std::map<int64_t, float>> reduce(const ZeroPlan& zero, const FlatLayout& layout, int world, int gas,
                                             GradReduceOptions opt, DType dtype = DType::f32) {
  opt.reduction = zero.reduction;
  std::vector<std::map<int64_t, float>> owned(static_cast<size_t>(world));
  test::run_thread_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    comm::GroupContext c = test::group_context(store, "grads", rank, size);
    comm::Communicator comm(c, comm::make_shm_backend(c));
    auto device = make_cpu_device();
    GradReducer r(comm, layout, *device, dtype, opt);
    const size_t esize = dtype_size(dtype);
    for (int m = 0; m < gas; ++m) {
      r.begin_micro(m == 0, m == gas - 1);
      for (int l = static_cast<int>(layout.layer_range.size()) - 1; l >= 0; --l) {  // backward order
        auto [first, end] = layout.layer_range[static_cast<size_t>(l)];
        auto* g = static_cast<char*>(r.layer_grads(l));
        for (size_t p = 0; p < layout.params.size(); ++p) {
          const ParamSlot& s = layout.params[p];
          if (s.layer != l) continue;
          for (int64_t i = 0; i < s.numel; ++i) {  // gradients accumulate
            char* at = g + (s.offset + i - first) * static_cast<int64_t>(esize);
            float v = 0;
            convert(at, dtype, &v, DType::f32, 1);
            v += grad(rank, m, p, i);
            convert(&v, DType::f32, at, dtype, 1);
          }
        }
        r.layer_done(l);
      }
      r.end_micro();
    }
    for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
      const PartitionGroup& g = layout.groups[gi];
      const int64_t n = zero.optimizer_partitioned ? g.part : g.numel;
      const int64_t begin = zero.optimizer_partitioned ? g.owned_begin(rank) : g.begin;
      std::vector<char> host(static_cast<size_t>(n) * esize);
      r.owned_device(static_cast<int>(gi)).copy_to_host(host.data(), r.owned(static_cast<int>(gi)), host.size());
      for (int64_t i = 0; i < n; ++i) {
        float v = 0;
        convert(host.data() + i * esize, dtype, &v, DType::f32, 1);
        owned[static_cast<size_t>(rank)][begin + i] = v;
      }
    }
  });
  return owned;
}

// What element e must hold: Σ over ranks and micro-steps of grad (0 for padding), divided by
// the world at stage 0.
float expected(const FlatLayout& layout, const ZeroPlan& zero, int world, int gas, int64_t e) {
  for (size_t p = 0; p < layout.params.size(); ++p) {
    const ParamSlot& s = layout.params[p];
    if (e < s.offset || e >= s.offset + s.numel) continue;
    float sum = 0;
    for (int r = 0; r < world; ++r)
      for (int m = 0; m < gas; ++m) sum += grad(r, m, p, e - s.offset);
    return zero.optimizer_partitioned ? sum : sum / static_cast<float>(world);
  }
  return 0.0f;  // alignment and group padding
}

void check_stage(int stage, int world, int gas, const GradReduceOptions& opt, DType dtype = DType::f32) {
  CAPTURE(stage, world, gas, opt.overlap, opt.reduce_scatter, dtype_name(dtype));
  const ZeroPlan zero = ZeroPlan::for_stage(stage);
  const FlatLayout layout = layout_for(zero, world);
  const auto owned = reduce(zero, layout, world, gas, opt, dtype);
  int64_t checked = 0;
  for (int r = 0; r < world; ++r)
    for (const auto& [e, v] : owned[static_cast<size_t>(r)]) {
      CAPTURE(r, e);
      REQUIRE(v == expected(layout, zero, world, gas, e));
      ++checked;
    }
  // Every rank owns its share: the whole array at stage 0, one slice each otherwise.
  CHECK(checked == (zero.optimizer_partitioned ? layout.total : world * layout.total));
}

}  // namespace

TEST_CASE("every ZeRO stage reduces to the sum (stages 1-3) or the mean (stage 0) over the ranks", "[grad_reducer]") {
  GradReduceOptions opt;
  opt.bucket_elements = 96;  // stage 0: several allreduce buckets
  for (int stage : {0, 1, 2, 3})
    for (int world : {1, 2, 4})
      for (int gas : {1, 3}) check_stage(stage, world, gas, opt);
}

TEST_CASE("stages 2-3 reduce the same without overlap_comm, and with allreduce instead of reduce-scatter",
          "[grad_reducer]") {
  GradReduceOptions opt;
  opt.overlap = false;
  for (int stage : {2, 3}) check_stage(stage, 2, 2, opt);
  GradReduceOptions ar;
  ar.reduce_scatter = false;
  for (int stage : {1, 2, 3}) check_stage(stage, 2, 2, ar);
}

TEST_CASE("bf16 gradients and a bf16 wire reduce exactly where the sums are representable", "[grad_reducer]") {
  GradReduceOptions opt;
  for (int stage : {0, 2}) check_stage(stage, 2, 2, opt, DType::bf16);
  GradReduceOptions wire;
  wire.comm_dtype = DType::bf16;
  for (int stage : {0, 1, 3}) check_stage(stage, 2, 2, wire);
}

TEST_CASE("stage N's slice over the world equals stage 0's elements", "[grad_reducer]") {
  const int world = 4, gas = 2;
  const ZeroPlan z0 = ZeroPlan::for_stage(0);
  const FlatLayout l0 = layout_for(z0, world);
  const auto full = reduce(z0, l0, world, gas, GradReduceOptions{});
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    const ZeroPlan zn = ZeroPlan::for_stage(stage);
    const FlatLayout ln = layout_for(zn, world);
    const auto parts = reduce(zn, ln, world, gas, GradReduceOptions{});
    // Layouts differ by stage (group padding), so compare by parameter element: each real
    // element's flat index in both layouts.
    REQUIRE(l0.params.size() == ln.params.size());
    int64_t compared = 0;
    for (size_t p = 0; p < l0.params.size(); ++p)
      for (int64_t i = 0; i < l0.params[p].numel; ++i) {
        const float at0 = full[0].at(l0.params[p].offset + i);
        float atn = 0;
        bool found = false;
        for (int r = 0; r < world && !found; ++r)
          if (auto it = parts[static_cast<size_t>(r)].find(ln.params[p].offset + i);
              it != parts[static_cast<size_t>(r)].end())
            atn = it->second, found = true;
        REQUIRE(found);
        CHECK(atn / static_cast<float>(world) == at0);
        ++compared;
      }
    CHECK(compared == l0.numel);
  }
}
