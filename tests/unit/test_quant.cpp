// ZeRO++ block int8 quantization: the shared element functions (kernels/quant_math.h) against
// fp64 references, DeepSpeed's group-count rule, and the CPU group loops (kernels/cpu/quant)
// against the element functions applied one by one.
#include "kernels/cpu/quant/quant_cpu.h"
#include "kernels/quant_math.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace dscpp;

TEST_CASE("quantize_int8 / dequantize_int8 against an fp64 reference", "[quant]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> x(4096);
  for (float& v : x) v = d(rng);
  x[100] = 3.5f;  // the group's +absmax: 128 does not fit, clamps to 127
  float absmax = 0;
  for (float v : x) absmax = hd::quant_absmax_step(absmax, v);
  REQUIRE(absmax == 3.5f);
  const float s = hd::quant_scale(absmax);
  CHECK(s == Approx(256.0 / 7.0));
  const float inv = 1.0f / s;
  for (float v : x) {
    const double ref = std::clamp(std::nearbyint(double(v) * double(s)), -128.0, 127.0);
    const int8_t q = hd::quantize_int8(v, s);
    CHECK(q == ref);
    // Round trip: ≤ absmax/256 (half a step) plus one full step at the +absmax clamp.
    const double err = std::fabs(hd::dequantize_int8(q, inv) - double(v));
    CHECK(err <= (v == absmax ? 2.0 : 1.0) * absmax / 256 + 1e-6);
  }
  CHECK(hd::quantize_int8(-3.5f, s) == -128);
  CHECK(hd::quant_scale(0.0f) == 1.0f);       // an all-zero group
  CHECK(hd::quantize_int8(0.5f, 1.0f) == 0);  // ties to even, like rint
  CHECK(hd::quantize_int8(1.5f, 1.0f) == 2);
}

TEST_CASE("qwz_group_count follows DeepSpeed's rule", "[quant]") {
  CHECK(hd::qwz_group_count(8000 * 8) == 8);
  CHECK(hd::qwz_group_count(8000) == 1);
  CHECK(hd::qwz_group_count(0) == 0);
  for (int64_t n : {64, 1000, 8000, 12345 * 8, 1 << 20, 3 * 1024 * 1024, 4096 * 11008}) {
    const int64_t g = hd::qwz_group_count(n);
    INFO("n = " << n << ", groups = " << g);
    CHECK(n % (8 * g) == 0);
    CHECK(hd::quant_group_size_ok(n, g));
  }
}

TEST_CASE("CPU group loops apply the element functions per group", "[quant]") {
  for (int64_t groups : {1, 3, 64}) {
    const int64_t per = 1000, n = groups * per;
    std::mt19937 rng(static_cast<uint32_t>(groups));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n)), back(x.size());
    for (int64_t i = 0; i < n; ++i) x[i] = d(rng) * float(i / per + 1);  // a different range per group
    std::fill(x.begin() + per, x.begin() + std::min(n, 2 * per), 0.0f);  // an all-zero group when groups > 1
    std::vector<int8_t> q(x.size());
    std::vector<float> inv(static_cast<size_t>(groups));
    kernels::quantize_int8_groups(x.data(), n, groups, q.data(), inv.data());
    kernels::dequantize_int8_groups(q.data(), inv.data(), n, groups, back.data());
    for (int64_t g = 0; g < groups; ++g) {
      float absmax = 0;
      for (int64_t i = 0; i < per; ++i) absmax = hd::quant_absmax_step(absmax, x[g * per + i]);
      const float s = hd::quant_scale(absmax);
      CHECK(inv[g] == 1.0f / s);
      for (int64_t i = g * per; i < (g + 1) * per; ++i) {
        REQUIRE(q[i] == hd::quantize_int8(x[i], s));
        REQUIRE(back[i] == float(q[i]) * inv[g]);
      }
    }
  }
  std::vector<float> x(10);
  std::vector<int8_t> q(10);
  float inv[3];
  CHECK_THROWS_WITH(kernels::quantize_int8_groups(x.data(), 10, 3, q.data(), inv),
                    Catch::Contains("do not split into 3 equal groups"));
}
