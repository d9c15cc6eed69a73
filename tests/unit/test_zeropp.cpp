// ZeRO++ qwZ: DeepSpeed's group-count rule, the int8 error bound, and that a quantized allgather
// over shm thread ranks delivers on every rank exactly the round trip of each rank's slice.
#include "collectives/communicator.h"
#include "core/half.h"
#include "device/device.h"
#include "kernels/cpu/quant/quant_cpu.h"
#include "kernels/quant_math.h"
#include "runtime/zero/zeropp.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace dscpp;
using hd::qwz_group_count;
using kernels::dequantize_int8_groups;
using kernels::quantize_int8_groups;

TEST_CASE("qwZ int8 error is at most absmax/256 per group (absmax/128 in the top bin)", "[qwz]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t n = 48000, groups = qwz_group_count(n);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  x[5] = 0.9f;          // a group with a large +absmax
  for (int64_t i = 16000; i < 24000; ++i) x[i] = 0.0f;  // an all-zero group: scale 1, exact zeros
  std::vector<int8_t> q(n);
  std::vector<float> scales(groups), back(n);
  quantize_int8_groups(x.data(), DType::f32, n, groups, q.data(), scales.data());
  dequantize_int8_groups(q.data(), scales.data(), n, groups, back.data(), DType::f32);
  const int64_t size = n / groups;
  double worst = 0;
  for (int64_t g = 0; g < groups; ++g) {
    float absmax = 0;
    for (int64_t i = g * size; i < (g + 1) * size; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    for (int64_t i = g * size; i < (g + 1) * size; ++i) {
      const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
      // 127 is the top level, so x·s ≥ 127.5 (the top half-step below +absmax) clamps: up to
      // absmax/128 off there. Plus a few fp32 ulps of absmax (1/s and q·(1/s) round in fp32).
      const bool top = x[i] >= absmax * (1 - 1.0 / 128);
      const double bound = (top ? absmax / 128.0 : absmax / 256.0) + absmax * 1e-6;
      if (err > bound) FAIL("element " << i << ": " << x[i] << " → " << back[i] << ", bound " << bound);
      if (absmax > 0) worst = std::max(worst, err / absmax);
    }
  }
  CHECK(worst > 1.0 / 1024);  // the bound is nearly reached: the test would see a looser rule
  for (int64_t i = 16000; i < 24000; ++i) REQUIRE(back[i] == 0.0f);
  // bf16 storage: dequantized values are rounded once into bf16.
  std::vector<uint16_t> xb(n), bb(n);
  for (int64_t i = 0; i < n; ++i) xb[i] = float_to_bf16_bits(x[i]);
  quantize_int8_groups(xb.data(), DType::bf16, n, groups, q.data(), scales.data());
  dequantize_int8_groups(q.data(), scales.data(), n, groups, bb.data(), DType::bf16);
  for (int64_t i = 0; i < n; ++i)
    REQUIRE(bb[i] == float_to_bf16_bits(static_cast<float>(q[i]) * scales[static_cast<size_t>(i / size)]));
}

TEST_CASE("a quantized allgather delivers every rank's int8 round trip, the same on every rank", "[qwz]") {
  for (int ranks : {1, 2, 3}) {
    const int64_t count = 24016;  // 16·19·79: 19 groups of 1264, an odd group count
    std::vector<std::vector<float>> gathered(static_cast<size_t>(ranks));
    auto slice = [&](int r) {
      std::vector<float> v(static_cast<size_t>(count));
      std::mt19937 rng(static_cast<unsigned>(100 + r));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& e : v) e = u(rng) * static_cast<float>(r + 1);
      return v;
    };
    test::run_thread_ranks(ranks, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      comm::GroupContext c = test::group_context(store, "qwz", rank, size);
      comm::Communicator comm(c, comm::make_shm_backend(c));
      auto device = make_cpu_device();
      std::vector<float> mine = slice(rank);
      std::vector<float>& out = gathered[static_cast<size_t>(rank)];
      out.assign(static_cast<size_t>(count * size), -1.0f);
      runtime::quantized_allgather(comm, *device, mine.data(), out.data(), count, DType::f32)->wait();
      CHECK(device->stats().total_current == 0);  // int8 and scale buffers gone after wait()
    });
    const int64_t groups = qwz_group_count(count);
    REQUIRE(groups == 19);
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> x = slice(r), expect(static_cast<size_t>(count));
      std::vector<int8_t> q(static_cast<size_t>(count));
      std::vector<float> scales(static_cast<size_t>(groups));
      quantize_int8_groups(x.data(), DType::f32, count, groups, q.data(), scales.data());
      dequantize_int8_groups(q.data(), scales.data(), count, groups, expect.data(), DType::f32);
      for (int on = 0; on < ranks; ++on)
        REQUIRE(std::equal(expect.begin(), expect.end(), gathered[static_cast<size_t>(on)].begin() + r * count));
    }
  }
}

TEST_CASE("qgZ int4: group sizes, error at most absmax/16 per group (absmax/8 in the top bin)", "[qgz]") {
  CHECK(runtime::qgz_group_size(4096) == 256);
  CHECK(runtime::qgz_group_size(16) == 16);
  CHECK(runtime::qgz_group_size(48) == 48);
  CHECK(runtime::qgz_group_size(24016) == 158);  // 24016 = 2·8·19·79: the largest even divisor ≤ 256
  const int64_t n = 4096, group = 256;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n), back(n, 0.0f);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> q(n / 2);
  std::vector<float> scales(n / group);
  kernels::quantize_int4_groups(x.data(), DType::f32, n, group, q.data(), scales.data());
  kernels::dequantize_int4_add(q.data(), scales.data(), n, group, back.data());
  double worst = 0;
  for (int64_t g = 0; g < n / group; ++g) {
    float absmax = 0;
    for (int64_t i = g * group; i < (g + 1) * group; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    for (int64_t i = g * group; i < (g + 1) * group; ++i) {
      const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
      const bool top = x[i] >= absmax * (1 - 1.0 / 8);  // clamps to 7: up to absmax/8 off
      const double bound = (top ? absmax / 8.0 : absmax / 16.0) + absmax * 1e-6;
      if (err > bound) FAIL("element " << i << ": " << x[i] << " → " << back[i] << ", bound " << bound);
      worst = std::max(worst, err / absmax);
    }
  }
  CHECK(worst > 1.0 / 20);  // near the bound: a finer rule would not be int4
}

TEST_CASE("qgZ's two-hop reduce-scatter over 2 nodes of 2 sums what its hops quantize", "[qgz]") {
  const int L = 2, N = 2, W = L * N;
  const int64_t part = 1040;  // groups of 208: not the 256 of larger slices
  auto input = [&](int r) {
    std::vector<float> v(static_cast<size_t>(W * part));
    std::mt19937 rng(static_cast<unsigned>(11 + r));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& e : v) e = u(rng);
    return v;
  };
  std::vector<std::vector<float>> got(W);
  test::run_thread_ranks(W, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    comm::GroupContext c = test::group_context(store, "qgz", rank, size);
    comm::Communicator world(c, comm::make_shm_backend(c));
    auto node = world.split(rank / L, rank, "node");
    auto cross = world.split(rank % L, rank, "cross");
    auto device = make_cpu_device();
    std::vector<float> in = input(rank);
    got[static_cast<size_t>(rank)].assign(static_cast<size_t>(part), -1.0f);
    runtime::quantized_reduce_scatter(*node, *cross, *device, in.data(), got[static_cast<size_t>(rank)].data(), part,
                                      DType::f32)
        ->wait();
    CHECK(device->stats().total_current == 0);
  });
  // The reference: the same quantization steps, simulated rank by rank.
  const int64_t gs = runtime::qgz_group_size(part);
  REQUIRE(gs == 208);
  auto round_trip_add = [&](const float* x, float* acc) {
    std::vector<uint8_t> q(static_cast<size_t>(part / 2));
    std::vector<float> sc(static_cast<size_t>(part / gs));
    kernels::quantize_int4_groups(x, DType::f32, part, gs, q.data(), sc.data());
    kernels::dequantize_int4_add(q.data(), sc.data(), part, gs, acc);
  };
  std::vector<std::vector<float>> in(W);
  for (int r = 0; r < W; ++r) in[static_cast<size_t>(r)] = input(r);
  for (int owner = 0; owner < W; ++owner) {
    std::vector<float> expect(static_cast<size_t>(part), 0.0f), exact(static_cast<size_t>(part), 0.0f);
    for (int b = 0; b < N; ++b) {  // node b's partial sum of the owner's slice, at rank b·L + j
      std::vector<float> partial(static_cast<size_t>(part), 0.0f);
      for (int s = 0; s < L; ++s)
        round_trip_add(in[static_cast<size_t>(b * L + s)].data() + owner * part, partial.data());
      round_trip_add(partial.data(), expect.data());
      for (int s = 0; s < L; ++s)
        for (int64_t i = 0; i < part; ++i)
          exact[static_cast<size_t>(i)] += in[static_cast<size_t>(b * L + s)][static_cast<size_t>(owner * part + i)];
    }
    REQUIRE(got[static_cast<size_t>(owner)] == expect);
    double err = 0;
    for (int64_t i = 0; i < part; ++i)
      err =
          std::max(err, std::fabs(static_cast<double>(expect[static_cast<size_t>(i)]) - exact[static_cast<size_t>(i)]));
    // Per hop at most absmax/8 of a group per contribution: 4 inputs of |x| ≤ 1 (each ≤ 1/8 off),
    // then 2 partial sums of |x| ≤ 2 + 1/4 (each ≤ 2.25/8 off): 0.5 + 0.5625 in all.
    CHECK(err <= 1.0625);
    CHECK(err > 0);
  }
}
