// The shared mixed-precision element functions (kernels/amp_math.h) and the CPU buffer loops
// over them (kernels/cpu/amp), against fp64 references: a 16-bit result must be within half
// an ulp of the exact value (one rounding), and the reductions within fp64 rounding.
#include "kernels/amp_math.h"
#include "kernels/cpu/amp/amp_cpu.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace dscpp;
using hd::Storage;

namespace {

// Half an ulp of the 16-bit format at |v| (normal range): 2^(e − mantissa bits − 1).
double half_ulp(double v, Storage s) {
  const int mant = s == Storage::f16 ? 10 : (s == Storage::bf16 ? 7 : 23);
  return std::ldexp(1.0, std::ilogb(v) - mant - 1);
}

std::vector<float> inputs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-100.0f, 100.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("store/load round to nearest and accumulate rounds the fp32 sum once", "[amp_math]") {
  const auto a = inputs(5000, 1), g = inputs(5000, 2);
  for (Storage s : {Storage::f32, Storage::f16, Storage::bf16}) {
    std::vector<uint32_t> buf(a.size());  // big enough for any storage
    for (size_t i = 0; i < a.size(); ++i) {
      hd::store(buf.data(), int64_t(i), s, a[i]);
      const double stored = hd::load(buf.data(), int64_t(i), s);
      REQUIRE(std::fabs(stored - a[i]) <= half_ulp(a[i], s));
      hd::accumulate(buf.data(), int64_t(i), s, g[i]);
      const double exact = double(float(stored + double(g[i])));  // the fp32 sum
      const double got = hd::load(buf.data(), int64_t(i), s);
      if (exact != 0) REQUIRE(std::fabs(got - exact) <= half_ulp(exact, s));
    }
  }
  // fp16 overflow becomes inf, which the loss scaler must see.
  uint16_t h = 0;
  hd::store(&h, 0, Storage::f16, 70000.0f);
  CHECK(std::isinf(hd::load(&h, 0, Storage::f16)));
}

TEST_CASE("nonfinite: NaN and ±inf only", "[amp_math]") {
  CHECK(hd::nonfinite(std::numeric_limits<float>::quiet_NaN()));
  CHECK(hd::nonfinite(std::numeric_limits<float>::infinity()));
  CHECK(hd::nonfinite(-std::numeric_limits<float>::infinity()));
  CHECK_FALSE(hd::nonfinite(std::numeric_limits<float>::max()));
  CHECK_FALSE(hd::nonfinite(std::numeric_limits<float>::denorm_min()));
  CHECK_FALSE(hd::nonfinite(0.0f));
}

TEST_CASE("CPU amp loops: sum of squares, overflow check and unscale against fp64", "[amp_math]") {
  for (int64_t n : {0, 1, 17, 100'003}) {
    auto x = inputs(static_cast<int>(n), 3);
    double ref = 0;
    for (float v : x) ref += double(v) * v;
    CHECK(kernels::sum_squares(x.data(), DType::f32, n) == Approx(ref).epsilon(1e-12));
    CHECK_FALSE(kernels::any_nonfinite(x.data(), DType::f32, n));
    if (n > 0) {
      x[static_cast<size_t>(n - 1)] = std::numeric_limits<float>::infinity();  // the tail element
      CHECK(kernels::any_nonfinite(x.data(), DType::f32, n));
    }
  }
  std::vector<uint16_t> b(1000);
  const auto x = inputs(1000, 4);
  kernels::store_from_f32(b.data(), DType::bf16, x.data(), 1000);
  kernels::scale_inplace(b.data(), DType::bf16, 0.125f, 1000);  // a power of two: exact
  std::vector<float> back(1000);
  kernels::load_to_f32(b.data(), DType::bf16, back.data(), 8.0f, 1000);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::fabs(back[i] - x[i]) <= half_ulp(x[i], Storage::bf16));
}
