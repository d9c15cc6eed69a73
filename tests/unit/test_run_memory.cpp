// The run's memory planner without an Engine: the model states of each ZeRO stage against the
// ZeRO paper's per-rank formulas (runtime/observe/memory_plan.h), CPU offload moving the
// optimizer row to the host, the run's own plan equal to the plan of its own setting, and the
// advice an out-of-memory error gives at limits chosen around the planned totals.
#include "configs/load.h"
#include "configs/plans.h"
#include "core/zero_estimate.h"
#include "device/device.h"
#include "runtime/train/run_memory.h"
#include "tests/unit/layer_decls.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::runtime;

namespace {

constexpr int kWorld = 4;

// 4 layers of 8192 fp32 parameters: every stage's partitions divide without padding.
const std::vector<LayerDecl>& layers() {
  static const std::vector<LayerDecl> l = {test::layer_decl("a", {8192}), test::layer_decl("b", {4096, 4096}),
                                           test::layer_decl("c", {8192}), test::layer_decl("d", {8192})};
  return l;
}
constexpr int64_t kPsi = 4 * 8192;

TrainPlan plan_at(int stage, const std::string& extra = "") {
  config::RunFacts facts;
  facts.world_size = kWorld;
  const auto loaded = config::load_config_text(
      "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.001}}, "
      "\"zero_optimization\": {\"stage\": " +
          std::to_string(stage) + extra + "}}",
      "memory.json", facts);
  REQUIRE(loaded.ok());
  return config::train_plan(loaded, kWorld);
}

RunMemoryFacts adam_facts(Device& host) {
  RunMemoryFacts f;
  f.optimizer_bytes_per_element = 8;  // Adam's m and v
  f.optimizer_states = 2;
  f.host = &host;
  return f;
}

int64_t at(const MemoryPlan& p, MemCategory c) { return p.bytes[static_cast<size_t>(c)]; }
int64_t host_at(const MemoryPlan& p, MemCategory c) { return p.host[static_cast<size_t>(c)]; }

}  // namespace

TEST_CASE("each stage's model states follow the ZeRO paper's per-rank formulas", "[run_memory]") {
  auto host = make_host_device();
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    const TrainPlan plan = plan_at(stage);
    const RunMemory m(layers(), plan, adam_facts(*host));
    const MemoryPlan p = m.plan(make_flat_layout(layers(), grouping_for(plan.zero, kWorld)), kWorld);
    const int64_t params = stage == 3 ? 4 * kPsi / kWorld : 4 * kPsi;
    if (stage == 3)
      CHECK(at(p, MemCategory::params) >= params);  // plus the gathered layers
    else
      CHECK(at(p, MemCategory::params) == params);
    CHECK(at(p, MemCategory::grads) == (stage >= 2 ? 4 * kPsi / kWorld : 4 * kPsi));
    CHECK(at(p, MemCategory::optimizer_state) == (stage >= 1 ? 8 * kPsi / kWorld : 8 * kPsi));
    // The run's own plan is the plan of its own setting.
    CHECK(m.plan_for(m.setting(kWorld)).total() == p.total());
  }
}

TEST_CASE("CPU offload moves the optimizer row and the gradient partition to the host", "[run_memory]") {
  auto host = make_host_device();
  const TrainPlan plan = plan_at(2);
  const RunMemory m(layers(), plan, adam_facts(*host));
  const MemoryPlan off = m.plan_for({2, true, false, kWorld});
  CHECK(at(off, MemCategory::optimizer_state) == 0);
  CHECK(host_at(off, MemCategory::optimizer_state) == (8 + 4) * kPsi / kWorld);  // state and the fp32 master
  CHECK(at(off, MemCategory::grads) == 0);
  CHECK(off.total() < m.plan_for({2, false, false, kWorld}).total());
}

TEST_CASE("the out-of-memory advice names what fits by the same plan", "[run_memory]") {
  auto host = make_host_device();
  const TrainPlan plan = plan_at(0);
  const RunMemory m(layers(), plan, adam_facts(*host));
  const MemorySetting here = m.setting(kWorld);
  REQUIRE(here.stage == 0);
  const int64_t stage3 = m.plan_for({3, false, false, kWorld}).total();
  const int64_t stage1 = m.plan_for({1, false, false, kWorld}).total();
  REQUIRE(stage3 < stage1);
  // Room for stage 3 but not stage 1: stage 3 is named, stage 1 is not.
  const std::string fits3 = m.advice(here, stage3);
  CHECK_THAT(fits3, Catch::Contains("these fit") && Catch::Contains("stage 3 on 4 ranks"));
  CHECK_THAT(fits3, !Catch::Contains("stage 1 on 4 ranks ("));
  // Below the smallest plan on 4 ranks nothing there fits, and the advice says so with every plan.
  int64_t smallest = INT64_MAX;
  for (int s = 0; s <= 3; ++s)
    for (bool off : {false, true}) smallest = std::min(smallest, m.plan_for({s, off, off && s == 3, kWorld}).total());
  const std::string more = m.advice(here, smallest - 1);
  CHECK_THAT(more, Catch::Contains("No other ZeRO stage or CPU offload fits") &&
                       Catch::Contains("stage 3 with offload_param and offload_optimizer cpu on 4 ranks plans"));
  CHECK_THAT(more, !Catch::Contains("these fit"));
  // An unknown limit lists every plan.
  CHECK_THAT(m.advice(here, 0), Catch::Contains("Per rank: stage 1 on 4 ranks plans"));
}

TEST_CASE("DeepSpeed's estimate is its estimator's at the run's setting", "[run_memory]") {
  auto host = make_host_device();
  const TrainPlan plan = plan_at(2);
  const RunMemory m(layers(), plan, adam_facts(*host));
  CHECK(m.deepspeed_estimate(kPsi, {2, false, false, kWorld}) ==
        estimate_zero2(static_cast<double>(kPsi), kWorld, 1, false).gpu_bytes);
  CHECK(m.deepspeed_estimate(kPsi, {3, false, false, kWorld}) ==
        estimate_zero3(static_cast<double>(kPsi), 8192.0, kWorld, 1, false, false, true).gpu_bytes);
}
