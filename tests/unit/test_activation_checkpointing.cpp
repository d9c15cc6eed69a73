// Activation checkpointing's options and layout (runtime/model/activation_layout.h): the
// section's presence turns it on, number_checkpoints is checked against the model's layer
// boundaries, segments follow the documented rule, and the bytes the layout names are what
// ActivationMemory allocates on the device and on the host. Training parity and measured peaks
// are in tests/system/activation_checkpointing.sh.
#include "configs/load.h"
#include "configs/plans.h"
#include "device/device.h"
#include "runtime/model/activation_layout.h"
#include "runtime/train/activation_checkpointing.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::runtime;
using Catch::Matchers::Contains;

namespace {

config::LoadedConfig load(const std::string& members) {
  std::string text = "{\"train_micro_batch_size_per_gpu\": 2";
  if (!members.empty()) text += ",\n" + members;
  text += "\n}";
  return config::load_config_text(text, "t.json", config::RunFacts{});
}

// The options the engine makes from this config for a model of `layers` layers.
CheckpointingOptions options_from(const dscpp::config::LoadedConfig& c, int layers) {
  const dscpp::config::TrainPlan plan = dscpp::config::train_plan(c, 1);
  return checkpointing_options(plan.activation_checkpointing, plan.file_name, layers);
}

// n layers: outputs of 16·(l+1) elements, saved 100 bytes each (not a multiple of 64).
std::vector<LayerDecl> layers(int n) {
  std::vector<LayerDecl> out(static_cast<size_t>(n));
  for (int l = 0; l < n; ++l) {
    out[static_cast<size_t>(l)].output_numel = 16 * (l + 1);
    out[static_cast<size_t>(l)].saved_bytes = 100;
  }
  return out;
}

}  // namespace

TEST_CASE("activation_checkpointing: off without the section, every boundary with an empty one") {
  CHECK_FALSE(options_from(load(""), 6).enabled);
  CheckpointingOptions o = options_from(load(R"("activation_checkpointing": {})"), 6);
  CHECK(o.enabled);
  CHECK(o.checkpoints == 5);
  o = options_from(load(R"("activation_checkpointing": {"number_checkpoints": 2, "cpu_checkpointing": true})"),
                            6);
  CHECK(o.checkpoints == 2);
  CHECK(o.cpu_checkpointing);
}

TEST_CASE("activation_checkpointing: number_checkpoints beyond the boundaries names the key and both numbers") {
  auto c = load(R"("activation_checkpointing": {"number_checkpoints": 6})");
  REQUIRE(c.ok());
  CHECK_THROWS_WITH(options_from(c, 6), Contains("activation_checkpointing.number_checkpoints") &&
                                                     Contains("expected 1 to 5") && Contains("found 6") &&
                                                     Contains("t.json"));
  // Keys and types are the config reader's: a misspelling names the closest key.
  auto typo = load(R"("activation_checkpointing": {"number_checkpoint": 2})");
  CHECK_FALSE(typo.ok());
  CHECK_THAT(typo.diagnostics.format("t.json"), Contains("number_checkpoints"));
}

TEST_CASE("activation_checkpointing: segments of floor(s*n/(k+1)) layers, checkpoints are their inputs") {
  CheckpointingOptions o;
  o.enabled = true;
  o.checkpoints = 2;
  ActivationLayout a = make_activation_layout(layers(7), o, 3);
  CHECK(a.segment_begin == std::vector<int>{0, 2, 4, 7});
  CHECK(a.segment_of == std::vector<int>{0, 0, 1, 1, 2, 2, 2});
  // Checkpoints: the outputs of layers 1 and 3, micro-batch 3, fp32.
  CHECK(a.checkpoint_bytes == std::vector<int64_t>{0, 3 * 32 * 4, 3 * 64 * 4});
  CHECK(a.checkpoint_total == 3 * 32 * 4 + 3 * 64 * 4);
  // Arena: the largest segment; each output and saved piece rounded up to 64 bytes, then its guard.
  auto al = [](int64_t x) { return (x + 63) / 64 * 64 + kGuardBytes; };
  int64_t last = 0;
  for (int l = 4; l < 7; ++l) last += al(3 * 16 * (l + 1) * 4) + al(300);
  CHECK(a.arena_bytes == last);
  CHECK(a.grad_bytes == 2 * (3 * 16 * 7 * 4 + kGuardBytes));
  CHECK(a.device_bytes(true) == last + a.checkpoint_total + a.grad_bytes);
  CHECK(a.host_bytes() == 0);

  CheckpointingOptions off;
  ActivationLayout whole = make_activation_layout(layers(7), off, 3);
  CHECK(whole.segments() == 1);
  CHECK(whole.checkpoint_total == 0);
  CHECK(whole.arena_bytes > a.arena_bytes);
}

TEST_CASE("activation_checkpointing: ActivationMemory allocates what the layout says, on device and host") {
  for (bool cpu : {false, true})
    for (bool contiguous : {false, true}) {
      CheckpointingOptions o;
      o.enabled = true;
      o.checkpoints = 3;
      o.cpu_checkpointing = cpu;
      o.contiguous = contiguous;
      ActivationLayout a = make_activation_layout(layers(5), o, 1);
      auto device = make_cpu_device(), host = make_host_device();
      const auto act = static_cast<size_t>(MemCategory::activations);
      {
        ActivationMemory m(a, *device, host.get());
        CHECK(device->stats().current[act] == a.device_bytes(false));
        CHECK(host->stats().current[act] == a.host_bytes());
        CHECK(a.host_bytes() == (cpu ? a.checkpoint_total : 0));
        // keep → restore round-trips a checkpoint, also through the host.
        std::vector<float> src(16 * 3, 0.0f), back(16 * 3, -1.0f);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
        void* out = m.output(2);
        device->copy_from_host(out, src.data(), src.size() * 4);
        m.keep(3, out, src.size() * 4);
        device->zero(out, src.size() * 4);
        device->copy_to_host(back.data(), m.restore(3, src.size() * 4), back.size() * 4);
        CHECK(back == src);
      }
      CHECK(device->stats().current[act] == 0);
      CHECK(host->stats().current[act] == 0);
    }
}
