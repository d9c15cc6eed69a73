// Collectives on device memory (cuda-sim's protected memory, which host code cannot touch):
// the Communicator hands each engine its buffers where the engine reads them — device buffers
// staged through host memory for the host engines (shm, gloo here; mpi and hierarchical in
// tests/system/comm_multiprocess.sh), host buffers staged into device memory for a device engine
// (what nccl needs: the engine below stands in for it) — in pieces when an operation exceeds the
// staging bound, and a one-rank group copies on the device. Checked with the collectives matrix
// on device buffers, against closed-form answers. Also: ranks that would share a GPU under nccl
// are refused by create_world, naming the remedy.
#include "collectives/communicator.h"
#include "core/protected_memory.h"
#include "kernels/cuda/sim/sim_kernels.h"
#include "tests/collectives/matrix.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <thread>

using namespace dscpp;
using namespace dscpp::comm;

namespace {

// An engine that reads `place` memory only: it fails when handed a buffer elsewhere (the host
// engines would fault; nccl would reject a host pointer), else runs `inner` — inside a
// ProtectedAccess scope for device memory, as a GPU's copy engines are.
class PlaceCheckingEngine final : public Backend {
 public:
  PlaceCheckingEngine(std::unique_ptr<Backend> inner, Memory place, Device& device)
      : inner_(std::move(inner)), place_(place), device_(device) {}
  std::string_view name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool supports(DType t, ReduceOp op) const override { return inner_->supports(t, op); }
  Memory memory() const override { return place_; }
  void run(const OpDesc& op) override {
    for (const void* p : {op.input, static_cast<const void*>(op.output)})
      if (p != nullptr && device_.holds(p) != (place_ == Memory::device))
        fail("{} engine handed a {} buffer", place_ == Memory::device ? "a device" : "a host",
             device_.holds(p) ? "device" : "host");
    ++runs_;
    if (place_ == Memory::device) {
      ProtectedAccess open;
      inner_->run(op);
    } else {
      inner_->run(op);
    }
  }
  std::unique_ptr<Backend> split(const SplitPlan&) override { fail("not used"); }
  int runs() const { return runs_; }

 private:
  std::unique_ptr<Backend> inner_;
  Memory place_;
  Device& device_;
  int runs_ = 0;
};

GroupContext device_context(const std::shared_ptr<Store>& store, int rank, int n, Device& device, Device& host,
                            size_t staging_bytes) {
  GroupContext c = test::group_context(store, "world", rank, n);
  c.device_memory = &device;
  c.host_memory = &host;
  c.staging_bytes = staging_bytes;
  return c;
}

// Odd counts against a 4 KiB bound: pieces of 1024 fp32 / 2048 bf16 elements per allreduce,
// 256 fp32 per rank for a reduce-scatter on 3 ranks, with uneven tails.
constexpr size_t kBound = 4096;
const test::MatrixOptions kMatrix{{0, 1, 7, 1000, 4099}, {DType::f32, DType::bf16}, true};

}  // namespace

TEST_CASE("device buffers through host engines: shm and gloo, staged in pieces") {
  auto device = make_sim_cuda_device();
  auto host = make_host_device();
  for (const char* engine : {"shm", "gloo"}) {
    for (int size : {2, 3}) {
      DYNAMIC_SECTION(engine << " x" << size) {
        test::run_thread_ranks(size, [&](int rank, int n, std::shared_ptr<Store> store) {
          GroupContext c = device_context(store, rank, n, *device, *host, kBound);
          auto raw = std::string(engine) == "shm" ? make_shm_backend(c) : make_gloo_backend(c);
          auto checking = std::make_unique<PlaceCheckingEngine>(std::move(raw), Memory::host, *device);
          PlaceCheckingEngine* seen = checking.get();
          Communicator comm(c, std::move(checking));
          test::MatrixOptions m = kMatrix;
          m.device = device.get();
          CHECK(test::check_collectives(comm, m) > 100);
          // In whole operations the matrix is 104 engine runs; in 4 KiB pieces about 1000.
          CHECK(seen->runs() > 400);
        });
      }
    }
  }
  // The staging areas went back to the host device; nothing stayed on the device.
  CHECK(host->stats().total_current == 0);
  CHECK(device->stats().total_current == 0);
}

TEST_CASE("host buffers to a device engine are staged into device memory; device buffers go as they are") {
  auto device = make_sim_cuda_device();
  auto host = make_host_device();
  test::run_thread_ranks(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    GroupContext c = device_context(store, rank, n, *device, *host, kBound);
    Communicator comm(c, std::make_unique<PlaceCheckingEngine>(make_shm_backend(c), Memory::device, *device));
    test::MatrixOptions on_host = kMatrix;  // host buffers: staged
    CHECK(test::check_collectives(comm, on_host) > 100);
    test::MatrixOptions on_device = kMatrix;  // device buffers: handed over directly
    on_device.device = device.get();
    CHECK(test::check_collectives(comm, on_device) > 100);
  });
}

TEST_CASE("one rank: device buffers are copied on the device, never through the host") {
  auto device = make_sim_cuda_device();
  auto host = make_host_device();
  CommOptions o;
  o.device_memory = device.get();
  o.host_memory = host.get();
  World w = create_world(o);
  REQUIRE(w.world->backend_name() == "self");
  test::MatrixOptions m = kMatrix;
  m.device = device.get();
  CHECK(test::check_collectives(*w.world, m) > 100);
  CHECK(host->stats().total_peak == 0);  // no staging area was ever made
}

TEST_CASE("nccl: ranks of one host on the same GPU are refused before NCCL sees them, naming the remedy") {
  // Two ranks with the same PCI bus id; the refusal comes before any NCCL call, so it runs here.
  const int port = 29400 + static_cast<int>(::getpid() % 500);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      CommOptions o;
      o.rank = r;
      o.world_size = 2;
      o.master_port = port;
      o.backend = BackendChoice::nccl;
      o.device_identity = "00000000:3B:00.0";
      o.connect_timeout = std::chrono::seconds(20);
      o.job_secret = "test_comm_device's job secret, 32 chars+";
      try {
        create_world(o);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    INFO(e);
    CHECK_THAT(e, Catch::Contains("ranks 0, 1 on host") &&
                      Catch::Contains("share the GPU at PCI bus 00000000:3B:00.0") &&
                      Catch::Contains("the nccl backend needs one GPU per rank") &&
                      Catch::Contains("start at most 1 rank on this host") &&
                      Catch::Contains("pass --comm_backend shm or --comm_backend gloo"));
  }
}
