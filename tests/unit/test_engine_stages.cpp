// The Engine in one process, threads as ranks over the shared-memory backend: ZeRO stages 1, 2
// and 3 on 2, 3 and 4 ranks train the mlp example to the weights stage 0 reaches on one rank
// with the same global batch (the equivalence tests/system/zero_train.sh checks through the
// launcher, here without processes, so it also runs under the sanitizers in seconds); and a
// stage-3 checkpoint of 4 ranks resumes at stage 1 on 2 ranks and at stage 0 on 1 rank to the
// unbroken run's weights (LocalPartitions reading another layout's fragments).
//
// Tolerance: the stages sum the same gradients in other orders (buckets, reduce-scatter
// slices, micro-steps), ~1e-7 relative per gradient, which Adam turns into updates of the same
// relative size times the learning rate (warmed up from 0, as zero_train.sh: without warmup and
// clipping Adam's first steps turn the noise of near-zero gradients into full-size updates,
// measured 8e-6). Measured max |Δw| 1.5e-8 after 6 steps at every stage; 1e-6, and a control
// with another global batch (measured 6.7e-3) must fall outside it.
#include "checkpoint/safetensors.h"
#include "checkpoint/zero_to_fp32.h"
#include "collectives/backend.h"
#include "collectives/communicator.h"
#include "configs/load.h"
#include "core/error.h"
#include "device/device.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "runtime/model/plugin.h"
#include "runtime/train/engine.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#ifndef DSCPP_TEST_MLP_PLUGIN
#error "DSCPP_TEST_MLP_PLUGIN (path of libmlp.so) must be defined by the build"
#endif

namespace fs = std::filesystem;
using namespace dscpp;
using namespace dscpp::runtime;
using Weights = std::map<std::string, std::vector<float>>;

namespace {

const char* kData = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_engine_stages.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

void plugin_log(void*, const char*) {}

// Trains `steps` optimizer steps of the mlp (odd widths, so parameters straddle rank boundaries;
// the first 1536 samples) at `stage` on `world` thread ranks with `micro` × `gas` samples per
// rank and step, AdamW with warmup and clipping as zero_train.sh; returns the consolidated fp32
// weights by name.
Weights train(int stage, int world, int micro, int gas, int steps, const fs::path& dir, const fs::path& load = {},
              uint64_t seed = 7) {
  const std::string config = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": {}, "gradient_accumulation_steps": {}, "steps_per_print": 100,
           "gradient_clipping": 1.0, "zero_optimization": {{"stage": {}, "reduce_bucket_size": 20000}},
           "optimizer": {{"type": "AdamW", "params": {{"lr": 0.002, "weight_decay": 0.01}}}},
           "scheduler": {{"type": "WarmupLR", "params": {{"warmup_num_steps": 4, "warmup_type": "linear"}}}}}})",
      micro, gas, stage);
  const fs::path save = dir / fmt::format("s{}w{}m{}g{}seed{}", stage, world, micro, gas, seed);
  test::run_thread_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    comm::GroupContext c = test::group_context(store, "world", rank, size, std::chrono::seconds(120));
    comm::Communicator comm(c, comm::make_shm_backend(c));
    auto device = make_cpu_device();
    const dscpp_ops ops = kernels::cpu_ops(DSCPP_F32, device.get());
    Plugin plugin(DSCPP_TEST_MLP_PLUGIN);
    dscpp_host_info host{};
    host.struct_size = sizeof(host);
    host.rank = rank;
    host.world_size = size;
    host.compute_dtype = DSCPP_F32;
    host.seed = seed;
    host.device_name = "cpu";
    host.log = plugin_log;
    plugin.create({"--limit", "1536", "--hidden", "37,23"}, host);
    config::RunFacts facts;
    facts.world_size = size;
    facts.total_steps = steps;
    const config::LoadedConfig loaded = config::load_config_text(config, "stages.json", facts);
    // No Catch2 assertion on a rank thread (they are not thread-safe): a throw reaches the caller.
    if (!loaded.ok()) fail("the test's config was not accepted: {}", loaded.diagnostics.format(loaded.file_name));
    TrainOptions o;
    o.steps = steps;
    o.save_dir = save.string();
    o.load_dir = load.string();
    o.eval = false;
    o.seed = seed;
    Engine engine(plugin, config::train_plan(loaded, comm.size()), comm, *device, ops, o);
    engine.run();
  });
  const fs::path out = dir / (save.filename().string() + ".safetensors");
  ckpt::zero_to_fp32(save.string(), out.string());
  ckpt::SafetensorsFile f(out.string());
  Weights w;
  for (const ckpt::TensorInfo& t : f.tensors()) {
    std::vector<float>& v = w[t.name];
    v.resize(static_cast<size_t>(t.numel));
    f.read(t.name, 0, t.numel, v.data(), DType::f32);
  }
  return w;
}

double max_diff(const Weights& a, const Weights& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (const auto& [name, va] : a) {
    const auto it = b.find(name);
    REQUIRE(it != b.end());
    REQUIRE(va.size() == it->second.size());
    for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(double(va[i]) - double(it->second[i])));
  }
  return m;
}

}  // namespace

TEST_CASE("ZeRO stages 1-3 on 2-4 ranks reach stage 0's weights on one rank", "[engine]") {
  if (!fs::exists(kData)) {
    WARN("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing checked");
    return;
  }
  TempDir dir;
  const int steps = 6;
  // Global batch 12 = micro × GAS × ranks in every run, GAS > 1 in two of them.
  const Weights ref = train(0, 1, 12, 1, steps, dir.path);
  REQUIRE(ref.size() == 6);  // three linear layers: weight and bias each
  for (auto [stage, world, micro, gas] : {std::tuple{1, 2, 2, 3}, {2, 3, 2, 2}, {3, 4, 3, 1}}) {
    CAPTURE(stage, world, micro, gas);
    const double d = max_diff(train(stage, world, micro, gas, steps, dir.path), ref);
    INFO("max |Δw| " << d);
    CHECK(d <= 1e-6);
  }
  // Control: a global batch of 6 instead of 12.
  const double control = max_diff(train(0, 1, 6, 1, steps, dir.path), ref);
  INFO("control max |Δw| " << control);
  CHECK(control > 1e-4);
}

TEST_CASE("a stage-3 checkpoint of 4 ranks resumes at stage 1 on 2 ranks and at stage 0 on 1", "[engine]") {
  if (!fs::exists(kData)) {
    WARN("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing checked");
    return;
  }
  // LocalPartitions reads each rank's owned fragments of another layout (load_owned): the
  // resumed runs must reach the unbroken run's weights (same tolerance as above).
  TempDir dir;
  const Weights straight = train(0, 1, 12, 1, 6, dir.path);
  train(3, 4, 3, 1, 3, dir.path);  // saves global_step3
  const fs::path half = dir.path / "s3w4m3g1seed7";
  for (auto [stage, world, micro, gas] : {std::tuple{1, 2, 2, 3}, {0, 1, 6, 2}}) {
    CAPTURE(stage, world, micro, gas);
    const double d = max_diff(train(stage, world, micro, gas, 6, dir.path, half), straight);
    INFO("max |Δw| " << d);
    CHECK(d <= 1e-6);
  }
  // Control: the same resume from another first half (other initial weights, seed 8) lands
  // elsewhere, so the runs above did start from the checkpoint.
  train(3, 4, 3, 1, 3, dir.path, {}, 8);
  const double control = max_diff(train(1, 2, 2, 3, 6, dir.path / "other", dir.path / "s3w4m3g1seed8"), straight);
  INFO("control max |Δw| " << control);
  CHECK(control > 1e-4);
}
