// One rank of a multi-process collectives check, started by dscpp, mpirun or a test script
// with the usual rank variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DSCPP_COMM_*).
//
//   comm_check matrix [small]  every op/dtype/size on the world, node, cross and a split group
//   comm_check behind          the last rank stops communicating after 3 operations; the
//                              others must fail naming it (exit 0 when they did)
//   comm_check die             the last rank exits(3) after 3 operations; same expectation
//   comm_check arrive          run with one rank missing: everyone must fail the rendezvous
//   comm_check diverge         needs DSCPP_CHECK_SCHEDULE=1: a light matrix passes checked, then
//                              the last rank skips an allgather and ends its step; every rank
//                              must fail at once with the schedule check's message, after
//                              which the unchecked engine still works (exit 0 when all held)
#include "collectives/communicator.h"
#include "kernels/cuda/sim/sim_kernels.h"
#include "tests/collectives/matrix.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace dscpp;

namespace {

int expect_failure(const std::function<void()>& body, const char* what) {
  auto start = std::chrono::steady_clock::now();
  try {
    body();
  } catch (const std::exception& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("FAILED AS EXPECTED after %.1f s: %s\n", s, e.what());
    return 0;
  }
  std::printf("UNEXPECTED SUCCESS: %s\n", what);
  return 1;
}

int diverge(comm::World& w) {
  if (!w.world->schedule_check()) {
    std::fprintf(stderr, "comm_check diverge: run with DSCPP_CHECK_SCHEDULE=1\n");
    return 1;
  }
  const bool last = w.world->rank() == w.world->size() - 1;
  test::MatrixOptions light{{1, 1000}, {DType::f32, DType::bf16}, true};
  size_t checks = test::check_collectives(*w.world, light) + test::check_collectives(*w.node, light) +
                  test::check_collectives(*w.cross, light);
  w.world->schedule_checkpoint("end of step 0");
  std::printf("rank %d: %zu checks passed with the schedule checked on %s\n", w.world->rank(), checks,
              w.description.c_str());
  std::vector<float> x(1000, 1.0f), all(1000 * static_cast<size_t>(w.world->size()));
  int rc = expect_failure(
      [&] {
        w.world->allreduce(x.data(), x.size(), DType::f32);
        if (!last) w.world->allgather(x.data(), all.data(), x.size(), DType::f32);
        w.world->schedule_checkpoint("end of step 1");
      },
      "a rank skipping an allgather");
  // Nothing ran after the exchange that found the divergence: unchecked, the engine still works.
  w.world->set_schedule_check(false);
  float one = 1;
  w.world->allreduce(&one, 1, DType::f32);
  if (one != static_cast<float>(w.world->size())) {
    std::printf("rank %d: allreduce after the divergence gave %g, expected %d\n", w.world->rank(), one,
                w.world->size());
    return 1;
  }
  std::fflush(stdout);
  return rc;
}

int run(const std::string& mode, bool small) {
  comm::CommOptions o = comm::comm_options_from_env();
  if (mode == "arrive") return expect_failure([&] { comm::create_world(o); }, "rendezvous with a rank missing");
  // DSCPP_TEST_DEVICE=cuda-sim: the matrix's buffers are in cuda-sim's protected device memory,
  // which the engines here (shm, gloo, mpi) cannot touch: the Communicator must stage them.
  std::unique_ptr<Device> device, host;
  if (const char* d = std::getenv("DSCPP_TEST_DEVICE"); d != nullptr && std::string(d) == "cuda-sim") {
    device = make_sim_cuda_device();
    host = make_host_device();
    o.device_memory = device.get();
    o.host_memory = host.get();
  }
  comm::World w = comm::create_world(o);
  int last = w.world->size() - 1;
  if (mode == "matrix") {
    test::MatrixOptions m;
    m.device = device.get();
    if (small) m.counts = {0, 1, 7, 1000, 4099};
    size_t checks = test::check_collectives(*w.world, m);
    // Tens of MB: several engine chunks/segments per operation, uneven tails.
    if (!small) checks += test::check_collectives(*w.world, {{(1u << 22) + 5}, {DType::f32}, false, device.get()});
    test::MatrixOptions light{{1, 1000}, {DType::f32, DType::bf16}, false, device.get()};
    checks += test::check_collectives(*w.node, light);
    checks += test::check_collectives(*w.cross, light);
    auto odd = w.world->split(w.world->rank() % 2, w.world->rank(), "parity");
    checks += test::check_collectives(*odd, light);
    // Rank 0 hosts the store: it must not exit while the other parity group may still be setting
    // up through it.
    w.world->barrier();
    std::printf("rank %d: %zu checks passed on %s; node group %d of %d, cross group %d of %d\n", w.world->rank(),
                checks, w.description.c_str(), w.node->rank(), w.node->size(), w.cross->rank(), w.cross->size());
    return 0;
  }
  if (mode == "diverge") return diverge(w);
  float x = 1;
  for (int i = 0; i < 3; ++i) w.world->allreduce(&x, 1, DType::f32);
  if (mode == "behind" && w.world->rank() == last) {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // the script kills us before
    return 0;
  }
  if (mode == "die" && w.world->rank() == last) {
    std::fflush(stdout);
    _exit(3);
  }
  int rc = expect_failure([&] { w.world->allreduce(&x, 1, DType::f32); }, "allreduce with a peer gone");
  std::fflush(stdout);
  _exit(rc);  // the hung communicator cannot be torn down cleanly; the OS cleans up
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "matrix";
  bool small = argc > 2 && std::string(argv[2]) == "small";
  try {
    return run(mode, small);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_check %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
