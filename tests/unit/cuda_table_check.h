// Shared pieces of the CUDA ops table's host-stub tests (test_cuda_ops_table.cpp,
// test_cuda_ops_fast.cpp): the pair of tables, the tolerance of differently ordered sums and the
// normwise / relative comparisons. Why each tolerance is what it is: test_cuda_ops_table.cpp's
// header.
#pragma once

#include "kernels/cuda/ops_table.h"
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace cuda_table_check {

using dscpp::cuda::cuda_ops;
using dscpp::cuda::OpsContext;
using ops_check::kU;
using ops_check::normwise;
using ops_check::sum_tol;
using ops_check::Vec;

// One CUDA table per test case on a null stream (the host stub runs everything in the call).
struct Tables {
  OpsContext ctx{nullptr};
  const dscpp_ops gpu = cuda_ops(DSCPP_F32, &ctx);
  const dscpp_ops* G() const { return &gpu; }
  const dscpp_ops* C() const { return ops_check::O(); }
};

// Distance in representable floats (adjacent floats are 1 apart, −0 = +0).
inline int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}
// max_i |a_i − b_i| / scale_i, for elementwise results whose rounding error is relative to a
// known term rather than to the (possibly cancelling) result.
inline double relative_to(const Vec& a, const Vec& b, const Vec& scale) {
  REQUIRE((a.size() == b.size() && a.size() == scale.size()));
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (d > 0) m = std::max(m, std::isnan(d) ? INFINITY : d / std::fabs(double(scale[i])));
  }
  return m;
}
inline Vec abs_of(const Vec& v) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}
using ops_check::bitwise;

}  // namespace cuda_table_check

#define CHECK_RELATIVE_TO(a, b, scale, tol)                   \
  do {                                                        \
    const double rel_ = relative_to((a), (b), (scale));       \
    INFO(#a " vs " #b ": " << rel_ / kU << " u of " #scale);  \
    CHECK(rel_ <= (tol));                                     \
  } while (0)
#define CHECK_NORMWISE(a, b, tol, ...)                         \
  do {                                                         \
    const double rel_ = normwise((a), (b), ##__VA_ARGS__);     \
    INFO(#a " vs " #b ": normwise " << rel_);     \
    CHECK(rel_ <= (tol));                         \
  } while (0)
