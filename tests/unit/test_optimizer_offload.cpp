// The swapped StateHome (offload_optimizer nvme) against an optimizer that owns its state:
// the same steps through acquire / prefetch / release in every pipelining mode give
// bit-identical weights and state; the traffic is exactly what the slots imply; changes made
// between steps (checkpoint loading) survive eviction; too few buffers is an error that says
// how many are needed.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "configs/ds_config.h"
#include "core/error.h"
#include "offload/aligned_buffer.h"
#include "runtime/optimizer.h"
#include "runtime/optimizer_offload.h"
#include "tests/unit/offload_fixture.h"

using namespace dscpp;
using namespace dscpp::runtime;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using dscpp::test::TempDir;

config::OptimizerConfig adamw() {
  config::OptimizerConfig c;
  c.type = "AdamW";
  c.kind = config::OptimizerKind::adamw;
  c.params.lr = 0.01;
  c.params.weight_decay = 0.1;
  return c;
}

std::vector<float> uniform(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

OptimizerOffload nvme(const std::string& path, bool read, bool write, int buffers) {
  OptimizerOffload o;
  o.device = OffloadDevice::nvme;
  o.nvme_path = path;
  o.buffer_count = buffers;
  o.pin_memory = false;
  o.pipeline_read = read;
  o.pipeline_write = write;
  o.aio.block_size = 16384;
  return o;
}

}  // namespace

TEST_CASE("swapped optimizer state steps bit-identically to owned state in every pipelining mode", "[offload]") {
  const std::vector<int64_t> numels{1000, 5003, 64, 3000};
  auto device = make_cpu_device();
  for (auto [read, write] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    CAPTURE(read, write);
    TempDir dir;
    auto owned = make_optimizer(adamw(), *device);
    auto swapped = make_optimizer(adamw(), *device);
    std::vector<std::vector<float>> w_owned, w_swapped;
    for (int64_t n : numels) {
      owned->add_group(n, {});
      swapped->add_external_group(n, {});
      w_owned.push_back(uniform(n, static_cast<uint32_t>(n)));
    }
    auto home = make_swapped_home(*swapped, numels, nvme(dir.path, read, write, 9), 0);
    // The master lives in the home: write the initial weights in, as refresh_from_params does.
    for (size_t i = 0; i < numels.size(); ++i) {
      SubGroupView v = home->acquire(static_cast<int>(i));
      std::copy(w_owned[i].begin(), w_owned[i].end(), v.master);
      home->release(static_cast<int>(i), true);
    }
    home->flush();
    const SwapStats before = home->swap_stats();
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < numels.size(); ++i) {
        auto g = uniform(numels[i], static_cast<uint32_t>(100 * step + i));
        owned->step(static_cast<int>(i), w_owned[i].data(), g.data(), {});
        SubGroupView v = home->acquire(static_cast<int>(i));
        home->prefetch(static_cast<int>(i) + 1);
        swapped->step(static_cast<int>(i), v.master, g.data(), {});
        home->release(static_cast<int>(i), true);
      }
    }
    home->flush();
    // Every step reads and writes each sub-group's 3 tensors once (slots rounded to 4 KiB);
    // pipelining changes when, not how much — except a sub-group still cached from the
    // previous step (the last one without pipeline_read), which is not read again.
    int64_t slots = 0;
    for (int64_t n : numels) slots += offload::round_up(n * 4, 4096);
    const SwapStats after = home->swap_stats();
    CHECK(after.bytes_written - before.bytes_written == 3 * 3 * slots);
    CHECK(after.bytes_read - before.bytes_read <= 3 * 3 * slots);
    CHECK(after.bytes_read - before.bytes_read >= 3 * 3 * (slots - offload::round_up(3000 * 4, 4096)));
    for (size_t i = 0; i < numels.size(); ++i) {
      SubGroupView v = home->acquire(static_cast<int>(i));
      CHECK(std::vector<float>(v.master, v.master + numels[i]) == w_owned[i]);
      auto st = owned->state(static_cast<int>(i));
      for (size_t s = 0; s < st.size(); ++s)
        CHECK(std::vector<float>(v.state[s], v.state[s] + numels[i]) ==
              std::vector<float>(st[s].data, st[s].data + numels[i]));
      home->release(static_cast<int>(i), false);
    }
  }
}

TEST_CASE("swapped state: deferred writes survive eviction; too few buffers is named", "[offload]") {
  auto device = make_cpu_device();
  TempDir dir;
  const std::vector<int64_t> numels{2000, 2000, 2000};
  auto opt = make_optimizer(adamw(), *device);
  for (int64_t n : numels) opt->add_external_group(n, {});
  {
    auto home = make_swapped_home(*opt, numels, nvme(dir.path, false, false, 3), 0);
    // Adam's initial state is zeros; the master starts at zero until the caller writes it.
    SubGroupView v = home->acquire(1);
    CHECK(v.state[0][1999] == 0.f);
    v.state[1][7] = 42.f;
    home->release(1, true, /*write_now=*/false);
    for (int i : {0, 2, 0}) {  // one set of buffers: sub-group 1 is evicted (written) here
      home->acquire(i);
      home->release(i, false);
    }
    v = home->acquire(1);
    CHECK(v.state[1][7] == 42.f);
    home->release(1, false);
  }
  auto opt2 = make_optimizer(adamw(), *device);
  for (int64_t n : numels) opt2->add_external_group(n, {});
  CHECK_THROWS_WITH(make_swapped_home(*opt2, numels, nvme(dir.path, true, true, 4), 0),
                    Contains("offload_optimizer.buffer_count is 4") && Contains("at least 9") &&
                        Contains("exp_avg, exp_avg_sq"));
  CHECK_THROWS_WITH(make_swapped_home(*opt2, numels, nvme(dir.path + "/missing", false, false, 4), 0),
                    Contains("nvme_path " + dir.path + "/missing does not exist"));
}
