// The flops profiler counts DeepSpeed's forward FLOPs per layer from the ops a layer calls,
// leaves the results of the real ops untouched, and ignores ops called during backward. On the
// profiled step it and the wall_clock_breakdown timers measure device time: they synchronize an
// asynchronous device around each measured region (and never otherwise).
#include "kernels/cpu/ops/cpu_ops.h"
#include "runtime/observe/flops_profiler.h"
#include "runtime/observe/train_log.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace dscpp;

namespace {

// A stand-in for an asynchronous device: enqueue() queues work that takes no host time until
// synchronize() waits for it (sleeps), the way kernels on a CUDA stream behave. Counts the
// synchronizations.
class AsyncDevice : public HostMemoryDevice {
 public:
  std::string name() const override { return "async"; }
  void synchronize() override {
    ++syncs;
    std::this_thread::sleep_for(std::chrono::duration<double>(pending_s));
    pending_s = 0;
  }
  void enqueue(double seconds) { pending_s += seconds; }
  int syncs = 0;

 protected:
  void* raw_allocate(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void raw_free(void* ptr) override { std::free(ptr); }

 private:
  double pending_s = 0;
};

}  // namespace

TEST_CASE("flops profiler: forward FLOPs per layer by DeepSpeed's rules, results unchanged", "[flops]") {
  const dscpp_ops real = kernels::cpu_ops(DSCPP_F32);
  config::FlopsProfilerConfig cfg;
  cfg.enabled = true;
  runtime::FlopsProfiler prof(real, {"a", "b"}, {100, 200}, cfg);
  const dscpp_ops& o = prof.ops();
  const int64_t M = 5, N = 7, K = 3;
  std::vector<float> A(M * K, 0.5f), B(K * N, 2.0f), C(M * N, 0.0f), C2(M * N, 0.0f), y(M * N);
  REQUIRE(o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N) == 0);
  CHECK(prof.forward_flops() == 0);  // outside any layer: not counted
  REQUIRE(real.gemm(&real, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C2.data(),
                    N) == 0);
  CHECK(C == C2);
  prof.enter(0, false);
  o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);  // 2·5·7·3
  o.gelu_forward(&o, C.data(), y.data(), M * N);                                                       // 35
  std::vector<float> gamma(N, 1.0f), beta(N, 0.0f), mean(M), rstd(M);
  o.layernorm_forward(&o, C.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), M, N,
                      1e-5f);  // 5·35
  prof.leave();
  CHECK(prof.forward_flops() == 210 + 35 + 175);
  prof.enter(1, true);  // backward: DeepSpeed's profiler counts the forward pass only
  o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
  prof.leave();
  prof.enter(1, false);
  o.gemm_strided_batched(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, 0, B.data(), N, 0, 0.0f,
                         C.data(), N, 0, 2);  // 2 × 210
  prof.leave();
  CHECK(prof.forward_flops() == 420 + 420);
  const std::string r = prof.report(0.5, 16);
  INFO(r);
  CHECK(r.find("fwd flops per rank:                               840.00") != std::string::npos);
  CHECK(r.find("samples/second:                                   32.00") != std::string::npos);
  CHECK(r.find("a ") != std::string::npos);
  prof.reset();
  CHECK(prof.forward_flops() == 0);
}

TEST_CASE("wall_clock_breakdown timers: each region bracketed by device synchronizations when enabled",
          "[flops][timers]") {
  AsyncDevice dev;
  runtime::Timers timers;
  SECTION("enabled") {
    timers.synchronize_with(&dev);
    dev.enqueue(0.3);  // work enqueued before the region: waited for at its start, not its time
    {
      runtime::Timers::Scope t(timers, "fwd");
      CHECK(dev.syncs == 1);
      dev.enqueue(0.03);  // the region's kernels: waited for at its end, its time
    }
    CHECK(dev.syncs == 2);
    CHECK(timers.total("fwd") >= 0.03);
    CHECK(timers.total("fwd") < 0.3);
    {
      runtime::Timers::Scope t(timers, "step");
      runtime::Timers::Scope g(timers, "optimizer_allgather");  // nested: bracketed too
    }
    CHECK(dev.syncs == 6);
    // A region left by an exception is neither synchronized at its end nor timed.
    CHECK_THROWS_AS(([&] {
                      runtime::Timers::Scope t(timers, "bwd");
                      throw std::runtime_error("fault");
                    }()),
                    std::runtime_error);
    CHECK(dev.syncs == 7);
    CHECK(timers.total("bwd") == 0);
    CHECK(timers.report_and_reset().find("fwd: ") == 0);
  }
  SECTION("disabled: never synchronizes, so regions keep overlapping") {
    dev.enqueue(0.03);
    {
      runtime::Timers::Scope t(timers, "fwd");
    }
    CHECK(dev.syncs == 0);
    CHECK(timers.total("fwd") < 0.03);  // the launch, not the work: what an H100 run showed
  }
}

TEST_CASE("flops profiler: device time on the profiled step only, layers adding up to the step", "[flops]") {
  const dscpp_ops real = kernels::cpu_ops(DSCPP_F32);
  config::FlopsProfilerConfig cfg;
  cfg.enabled = true;
  runtime::FlopsProfiler prof(real, {"a", "b"}, {100, 200}, cfg);
  AsyncDevice dev;
  // Outside the profiled step: no synchronization.
  prof.enter(0, false);
  dev.enqueue(0.02);
  prof.leave();
  CHECK(dev.syncs == 0);
  dev.enqueue(0.3);  // the previous step's tail: not the profiled step's time
  prof.begin_step(dev);
  CHECK(dev.syncs == 1);
  CHECK(prof.in_step());
  CHECK(prof.layer_seconds(0, false) == 0);  // reset
  dev.enqueue(0.2);  // a gather before the layer: not the layer's time
  prof.enter(0, false);
  CHECK(dev.syncs == 2);
  dev.enqueue(0.04);
  prof.leave();
  CHECK(dev.syncs == 3);
  prof.enter(1, false);
  dev.enqueue(0.04);
  prof.leave();
  prof.enter(1, true);
  CHECK(dev.syncs == 6);
  dev.enqueue(0.04);
  // A recompute's last layer gets no leave(): entering the next closes it with one synchronization.
  prof.enter(0, true);
  CHECK(dev.syncs == 7);
  dev.enqueue(0.04);
  prof.leave();
  CHECK(dev.syncs == 8);
  const double step_s = prof.end_step();
  CHECK(dev.syncs == 9);
  CHECK_FALSE(prof.in_step());
  double layers_s = 0;
  for (int l = 0; l < 2; ++l)
    for (bool bwd : {false, true}) {
      CHECK(prof.layer_seconds(l, bwd) >= 0.04);
      CHECK(prof.layer_seconds(l, bwd) < 0.2);
      layers_s += prof.layer_seconds(l, bwd);
    }
  // The step is the gather plus the layers, and not the tail before begin_step.
  CHECK(step_s >= layers_s + 0.2);
  CHECK(step_s < layers_s + 0.2 + 0.25);
  // After the profiled step: no synchronization again.
  prof.enter(0, false);
  prof.leave();
  CHECK(dev.syncs == 9);
}
