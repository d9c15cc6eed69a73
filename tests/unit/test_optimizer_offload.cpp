// The swapped StateHome (offload_optimizer nvme) against an optimizer that owns its state:
// the same steps through acquire / prefetch / release in every pipelining mode give
// bit-identical weights and state; the traffic is exactly what the slots imply; changes made
// between steps (checkpoint loading) survive eviction; too few buffers is an error that says
// how many are needed. Partial offload (ratio < 1): how many sub-groups are offloaded
// (DeepSpeed's int(ratio · n)), and a split home that steps the first ones swapped and the rest
// resident on the training device, bit-identically, with each share's state counted on its
// own device.
#include "configs/ds_config.h"
#include "core/error.h"
#include "offload/aligned_buffer.h"
#include "runtime/offload/optimizer_offload.h"
#include "runtime/optim/optimizer.h"
#include "runtime/zero/master_weights.h"
#include "tests/unit/offload_fixture.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

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

OptimizerOffloadPlan nvme(const std::string& path, bool read, bool write, int buffers) {
  OptimizerOffloadPlan o;
  o.device = OffloadDevice::nvme;
  o.nvme_path = path;
  o.buffer_count = buffers;
  o.pin_memory = false;
  o.pipeline_read = read;
  o.pipeline_write = write;
  o.aio.block_size = 16384;
  return o;
}

// Every sub-group of `home` holds the masters `w` and the state of the same groups of `reference`.
void check_home_equals(StateHome& home, Optimizer& reference, const std::vector<int64_t>& numels,
                       const std::vector<std::vector<float>>& w) {
  for (size_t i = 0; i < numels.size(); ++i) {
    SubGroupView v = home.acquire(static_cast<int>(i));
    CHECK(std::vector<float>(v.master, v.master + numels[i]) == w[i]);
    auto st = reference.state(static_cast<int>(i));
    for (size_t s = 0; s < st.size(); ++s)
      CHECK(std::vector<float>(v.state[s], v.state[s] + numels[i]) ==
            std::vector<float>(st[s].data, st[s].data + numels[i]));
    home.release(static_cast<int>(i), false);
  }
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
    check_home_equals(*home, *owned, numels, w_owned);
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

TEST_CASE("partial offload: the first int(ratio * n) sub-groups are offloaded, as DeepSpeed counts them", "[offload]") {
  OptimizerOffloadPlan o;
  o.device = OffloadDevice::cpu;
  auto k = [&](double ratio, int n) {
    o.ratio = ratio;
    return offloaded_sub_groups(o, n);
  };
  CHECK(k(1.0, 7) == 7);
  CHECK(k(0.5, 7) == 3);  // 3.5 truncated
  CHECK(k(0.0, 7) == 0);
  CHECK(k(0.5, 0) == 0);
  CHECK(k(0.7, 10) == 7);     // 7.000000000000001
  CHECK(k(0.29, 100) == 28);  // 28.999999999999996: Python's int() gives 28 too, not 29
  CHECK(k(1.0 / 3.0, 3) == 1);
  o.device = OffloadDevice::none;
  CHECK(k(1.0, 7) == 0);  // nothing is offloaded without offload

  o.device = OffloadDevice::nvme;
  o.ratio = 0.5;
  const std::vector<SubGroup> subs{{0, 1000}, {2, 5003}, {3, 64}, {5, 3000}};
  OffloadSplit split = offload_split(subs, o);
  CHECK(split.offloaded == 2);
  CHECK(split.resident == 2);
  CHECK(split.offloaded_elements == 6003);
  CHECK(split.largest_offloaded == 5003);
  o.ratio = 0.0;
  split = offload_split(subs, o);
  CHECK((split.offloaded == 0 && split.resident == 4 && split.offloaded_elements == 0 && split.largest_offloaded == 0));
}

TEST_CASE("split home: offloaded sub-groups swapped, the rest on the training device, bit-identical steps",
          "[offload]") {
  const std::vector<int64_t> numels{1000, 5003, 64, 3000, 777};
  const int k = 2;                  // ratio 0.5 of 5
  auto device = make_cpu_device();  // the training device
  auto host = make_cpu_device();    // the offloaded state's host memory (offload cpu)
  for (bool swapped : {true, false}) {
    CAPTURE(swapped);
    TempDir dir;
    auto owned = make_optimizer(adamw(), *device);
    auto split = make_optimizer(adamw(), *host);  // made on the host, as the engine makes it for offload cpu
    std::vector<std::vector<float>> w_owned;
    std::vector<float> host_master, device_master;
    int64_t off_elements = 0, resident_elements = 0;
    for (size_t i = 0; i < numels.size(); ++i) {
      const int64_t n = numels[i];
      owned->add_group(n, {});
      if (static_cast<int>(i) >= k)
        split->add_group_on(*device, n, {});
      else if (swapped)
        split->add_external_group(n, {});
      else
        split->add_group_on(*host, n, {});
      (static_cast<int>(i) < k ? off_elements : resident_elements) += n;
      w_owned.push_back(uniform(n, static_cast<uint32_t>(n)));
    }
    // Adam's state (m and v) of each share on its own device; nothing on the other.
    CHECK(device->stats().current[static_cast<size_t>(MemCategory::optimizer_state)] ==
          (resident_elements + off_elements) * 8 + resident_elements * 8);  // `owned` is on the device too
    CHECK(host->stats().current[static_cast<size_t>(MemCategory::optimizer_state)] == (swapped ? 0 : off_elements * 8));
    // The masters: the offloaded share's on the host (or in the swap file), the rest on the device.
    host_master.resize(static_cast<size_t>(off_elements));
    device_master.resize(static_cast<size_t>(resident_elements));
    std::vector<float*> bases(numels.size(), nullptr);
    for (size_t i = 0, at = 0; i < numels.size(); at += static_cast<size_t>(numels[i]), ++i)
      bases[i] = static_cast<int>(i) < k ? host_master.data() + at : device_master.data() + (at - off_elements);
    std::unique_ptr<StateHome> off =
        swapped ? make_swapped_home(*split, std::vector<int64_t>(numels.begin(), numels.begin() + k),
                                    nvme(dir.path, true, true, 9), 0)
                : make_resident_home(*host, *split, bases);
    auto home = make_split_home(std::move(off), k, make_resident_home(*device, *split, bases));
    CHECK(&home->memory(k) == device.get());
    if (!swapped) CHECK(&home->memory(0) == host.get());
    for (size_t i = 0; i < numels.size(); ++i) {
      SubGroupView v = home->acquire(static_cast<int>(i));
      std::copy(w_owned[i].begin(), w_owned[i].end(), v.master);
      home->release(static_cast<int>(i), true);
    }
    home->flush();
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < numels.size(); ++i) {
        auto g = uniform(numels[i], static_cast<uint32_t>(100 * step + i));
        owned->step(static_cast<int>(i), w_owned[i].data(), g.data(), {});
        SubGroupView v = home->acquire(static_cast<int>(i));
        home->prefetch(static_cast<int>(i) + 1);  // past the offloaded ones: the resident home, a no-op
        split->step(static_cast<int>(i), v.master, g.data(), {});
        home->release(static_cast<int>(i), true);
      }
      home->prefetch(0);
    }
    home->flush();
    CHECK((home->swap_stats().bytes_written > 0) == swapped);
    check_home_equals(*home, *owned, numels, w_owned);
    // The resident share really is the device's: its masters are the device copy.
    CHECK(std::vector<float>(device_master.begin(), device_master.begin() + numels[static_cast<size_t>(k)]) ==
          w_owned[static_cast<size_t>(k)]);
  }
}
