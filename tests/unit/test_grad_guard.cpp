// The gradient guard without an Engine: two thread ranks hold gradient slices (partitions or
// replicas), and the verdict — step or skip, norm, the factor the update applies — is checked
// against the arithmetic DeepSpeed's engine does (global norm over the world, clip coefficient
// max_norm / (norm + 1e-6), unscale and clip in one multiplication, the loss scale's rules).
#include "collectives/backend.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "device/device.h"
#include "runtime/optim/grad_guard.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

using namespace dscpp;
using namespace dscpp::runtime;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs `body(guard, slice_for)` on 2 thread ranks; `slice_for(values)` puts this rank's values
// on its device in `dtype` and returns the slice. Returns each rank's verdicts in order.
template <typename Body>
std::vector<std::vector<GradVerdict>> on_two_ranks(const LossScalePlan& scaling, GradGuardOptions o, Body body) {
  std::vector<std::vector<GradVerdict>> verdicts(2);
  test::run_thread_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    comm::GroupContext c = test::group_context(store, "guard", rank, size);
    comm::Communicator world(c, comm::make_shm_backend(c));
    auto device = make_cpu_device();
    GradGuard guard(scaling, o, world);
    std::vector<std::unique_ptr<DeviceBuffer>> owned;
    auto slice_for = [&](const std::vector<float>& v, DType dtype) {
      owned.push_back(std::make_unique<DeviceBuffer>(*device, v.size() * dtype_size(dtype), MemCategory::grads));
      void* p = owned.back()->data();
      std::vector<unsigned char> bits(v.size() * dtype_size(dtype));
      convert(v.data(), DType::f32, bits.data(), dtype, v.size());
      device->copy_from_host(p, bits.data(), bits.size());
      return GradSlice{p, static_cast<int64_t>(v.size()), device.get()};
    };
    body(rank, guard, slice_for, verdicts[static_cast<size_t>(rank)]);
  });
  return verdicts;
}

LossScalePlan fp16_dynamic(double init, int64_t window) {
  LossScalePlan p;
  p.rule = LossScaleRule::zero;
  p.init_scale = init;
  p.scale_window = window;
  p.raise_at_min_scale = true;
  return p;
}

}  // namespace

TEST_CASE("the global norm is over the world: partitions add, replicas count once", "[grad_guard]") {
  for (bool partitioned : {true, false}) {
    CAPTURE(partitioned);
    auto v = on_two_ranks(LossScalePlan{}, GradGuardOptions{}, [&](int rank, GradGuard& g, auto slice_for, auto& out) {
      // Partitioned: rank 0 holds (3, 4), rank 1 holds (12); replicated: both hold (3, 4, 12).
      std::vector<GradSlice> s;
      if (partitioned)
        s.push_back(slice_for(rank == 0 ? std::vector<float>{3, 4} : std::vector<float>{12}, DType::f32));
      else
        s = {slice_for({3, 4}, DType::f32), slice_for({12}, DType::f32)};
      out.push_back(g.check(s, DType::f32, partitioned, 1.0, 1));
    });
    for (const auto& r : v) {
      REQUIRE(r[0].step);
      CHECK(r[0].norm == 13.0);
      CHECK(r[0].grad_scale == 1.0f);
    }
  }
}

TEST_CASE("clipping unscales and clips in one factor, as DeepSpeed does", "[grad_guard]") {
  GradGuardOptions o;
  o.clipping = 1.0;
  for (double scale : {1.0, 1024.0}) {
    CAPTURE(scale);
    LossScalePlan fixed;
    fixed.rule = scale == 1.0 ? LossScaleRule::none : LossScaleRule::fixed;
    fixed.init_scale = scale;
    auto v = on_two_ranks(fixed, o, [&](int rank, GradGuard& g, auto slice_for, auto& out) {
      const float k = static_cast<float>(scale);
      // Norm 5 (unscaled), over the limit; then norm 0.5, under it.
      out.push_back(g.check({{slice_for({rank == 0 ? 3 * k : 4 * k}, DType::f32)}}, DType::f32, true, 1.0, 1));
      out.push_back(g.check({{slice_for({rank == 0 ? 0.3f * k : 0.4f * k}, DType::f32)}}, DType::f32, true, 1.0, 2));
    });
    for (const auto& r : v) {
      REQUIRE(r[0].step);
      CHECK(r[0].norm == Approx(5.0).epsilon(1e-7));
      const double coef = 1.0 / (r[0].norm + 1e-6);
      CHECK(r[0].grad_scale == static_cast<float>(scale == 1.0 ? coef : coef / scale));
      REQUIRE(r[1].step);
      CHECK(r[1].grad_scale == static_cast<float>(1.0 / scale));  // under the limit: unscale only
    }
  }
}

TEST_CASE("an fp16 overflow on one rank skips the step on every rank and halves the scale", "[grad_guard]") {
  auto v =
      on_two_ranks(fp16_dynamic(1024, 2), GradGuardOptions{}, [&](int rank, GradGuard& g, auto slice_for, auto& out) {
        const float inf = std::numeric_limits<float>::infinity();
        out.push_back(g.check({{slice_for({rank == 1 ? inf : 1.0f}, DType::f16)}}, DType::f16, true, 1.0, 1));
        CHECK(g.scaler().scale() == 512);
        for (int step = 2; step <= 4; ++step)
          out.push_back(g.check({{slice_for({512.0f}, DType::f16)}}, DType::f16, true, 1.0, step));
        // DeepSpeed 0.19.8: the first doubling after the overflow comes on the (window+1)-th clean step.
        CHECK(g.scaler().scale() == 1024);
        CHECK(g.scaler().state().skipped_steps == 1);
        CHECK(g.nonfinite_in_a_row() == 0);  // an overflow is the scaler's, not a non-finite step
      });
  for (const auto& r : v) {
    CHECK_FALSE(r[0].step);
    CHECK(r[0].norm == -1);
    CHECK(r[1].step);
    CHECK(r[1].norm == Approx(std::sqrt(2.0)));  // 512 on each rank, unscaled by 512
  }
}

TEST_CASE("non-finite losses and norms skip steps until the limit in a row stops the run", "[grad_guard]") {
  GradGuardOptions o;
  o.max_nonfinite = 3;
  on_two_ranks(LossScalePlan{}, o, [&](int rank, GradGuard& g, auto slice_for, auto&) {
    // A NaN loss on rank 1 only: every rank skips (the verdict is agreed).
    CHECK_FALSE(g.check({{slice_for({1.0f}, DType::f32)}}, DType::f32, true, rank == 1 ? kNaN : 1.0, 1).step);
    CHECK(g.nonfinite_in_a_row() == 1);
    // A finite step resets the count.
    CHECK(g.check({{slice_for({1.0f}, DType::f32)}}, DType::f32, true, 1.0, 2).step);
    CHECK(g.nonfinite_in_a_row() == 0);
    // NaN gradients on rank 0, without overflow checking: caught by the norm.
    auto nan_grads = [&](int64_t step) {
      return g.check({{slice_for({rank == 0 ? static_cast<float>(kNaN) : 1.0f}, DType::f32)}}, DType::f32, true, 1.0,
                     step);
    };
    CHECK_FALSE(nan_grads(3).step);
    CHECK_FALSE(nan_grads(4).step);
    CHECK_THROWS_WITH(nan_grads(5), Catch::Contains("step 5: non-finite gradients (global norm nan), 3 in a row") &&
                                        Catch::Contains("DSCPP_MAX_NONFINITE_STEPS=3"));
  });
}

TEST_CASE("bf16.check_grad_overflow skips an inf step without loss scaling", "[grad_guard]") {
  GradGuardOptions o;
  o.check_bf16_overflow = true;
  on_two_ranks(LossScalePlan{}, o, [&](int rank, GradGuard& g, auto slice_for, auto&) {
    CHECK(g.checks_overflow());
    const float inf = std::numeric_limits<float>::infinity();
    const GradVerdict v = g.check({{slice_for({rank == 0 ? inf : 2.0f}, DType::bf16)}}, DType::bf16, true, 1.0, 1);
    CHECK_FALSE(v.step);
    CHECK(g.nonfinite_in_a_row() == 1);
    CHECK(g.scaler().scale() == 1);
  });
}
