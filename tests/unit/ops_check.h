// Shared pieces of the ops tests (test_ops.cpp, test_gemm.cpp, test_attention.cpp, the CUDA
// table's host-stub tests, gpu_parity): the fp32 ops table, random inputs, tolerance checks
// against fp64 references and central finite differences, the normwise comparison of sums
// added in different orders, and the dropout mask from its documented formula. The tolerance
// conventions are explained at the top of test_ops.cpp.
#pragma once

#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace ops_check {

using dscpp::kernels::cpu_ops;
using Vec = std::vector<float>;
using DVec = std::vector<double>;

inline const dscpp_ops& ops() {
  static const dscpp_ops t = cpu_ops(DSCPP_F32);
  return t;
}
inline const dscpp_ops* O() { return &ops(); }

inline constexpr double kU = 1.0 / (1 << 24);  // fp32 unit roundoff

// Normwise tolerance of a result built on K-term sums that the two tables add in different
// orders. Their rounding errors behave like random walks, ~√K·u apart; the worst case K·u is
// far above what either order reaches and would hide real mistakes (a 1e-3 error in one of 300
// inputs). 2√K·u plus 4u for the operations around the sum; measured on these inputs: ≤ 6u.
inline double sum_tol(int64_t K) {
  return (2 * std::sqrt(double(K)) + 4) * kU;
}

// max|a − b| / max(max|b|, floor): 0 when equal, ∞ when they disagree on a NaN. `floor` is
// the size of the terms a result is computed from, where the result itself may cancel to ~0.
inline double normwise(const Vec& a, const Vec& b, double floor = 0) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d) && !(std::isnan(a[i]) && std::isnan(b[i]))) return INFINITY;
    err = std::max(err, std::isnan(d) ? 0.0 : d);
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return err == 0 ? 0 : err / scale;
}
// Same bits (NaNs included), same length.
inline bool bitwise(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The GEMM backends this CPU can run (OpenBLAS always; dscpp's AVX-512 kernel where it can).
inline std::vector<dscpp::kernels::GemmBackend> backends() {
  std::vector<dscpp::kernels::GemmBackend> b;
  for (auto k : {dscpp::kernels::GemmBackend::openblas, dscpp::kernels::GemmBackend::avx512})
    if (dscpp::kernels::gemm_backend_available(k)) b.push_back(k);
  return b;
}

// Restores the GEMM backend and thread count a test changed.
struct Restore {
  dscpp::kernels::GemmBackend backend = dscpp::kernels::gemm_backend();
  int threads = dscpp::num_threads();
  ~Restore() {
    dscpp::kernels::set_gemm_backend(backend);
    dscpp::kernels::set_cpu_threads(threads);
  }
};

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline Vec rnd(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline DVec to_d(const Vec& v) { return DVec(v.begin(), v.end()); }

// |got − ref| ≤ atol + rtol·|ref| everywhere; reports the worst element.
inline void check_close(const Vec& got, const DVec& ref, double atol, double rtol) {
  REQUIRE(got.size() == ref.size());
  size_t worst = 0;
  double worst_excess = -1.0;
  bool ok = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]), lim = atol + rtol * std::fabs(ref[i]);
    if (!(err <= lim)) ok = false;
    if (!(err - lim <= worst_excess)) worst_excess = err - lim, worst = i;
  }
  if (got.empty()) return;
  INFO("worst at " << worst << ": got " << got[worst] << ", ref " << ref[worst]);
  CHECK(ok);
}
// The tolerance of a gradient checked by finite differences (see the top of the file).
inline void check_grad(const Vec& got, const DVec& ref) {
  double scale = 1.0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  check_close(got, ref, 1e-4 * scale, 1e-4);
}

// Central differences of L with respect to v at `idx` (all of v when empty); other entries 0.
inline DVec fd_grad(const std::function<double(const DVec&)>& L, DVec v, std::vector<size_t> idx = {}) {
  if (idx.empty())
    for (size_t i = 0; i < v.size(); ++i) idx.push_back(i);
  DVec g(v.size(), 0.0);
  const double h = 1e-3;
  for (size_t i : idx) {
    const double x = v[i];
    v[i] = x + h;
    const double up = L(v);
    v[i] = x - h;
    const double down = L(v);
    v[i] = x;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}
// A sample of indices of an n-element tensor (all of them when n is small).
inline std::vector<size_t> sample(size_t n, uint32_t seed, size_t k = 48) {
  std::vector<size_t> idx;
  if (n <= k) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  std::mt19937 g(seed);
  for (size_t i = 0; i < k; ++i) idx.push_back(g() % n);
  return idx;
}
inline Vec only(const Vec& v, const std::vector<size_t>& idx) {
  Vec r(v.size(), 0.0f);
  for (size_t i : idx) r[i] = v[i];
  return r;
}
inline double dot(const DVec& w, const DVec& y) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += w[i] * y[i];
  return s;
}

// The dropout op's mask as model.h documents it (ABI 10), written out here rather than taken from
// kernels/ops_math.h, so that every table is held to the documented draw: element i of a call with
// `seed` is kept when the high 32 bits of splitmix64(splitmix64(seed) + i·γ) reach ⌊p·2³²⌋.
inline uint64_t splitmix64_ref(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline bool dropout_keep_ref(uint64_t seed, int64_t i, float p) {
  const uint64_t bits = splitmix64_ref(splitmix64_ref(seed) + uint64_t(i) * 0x9E3779B97F4A7C15ull);
  return (bits >> 32) >= uint64_t(std::floor(double(p) * 4294967296.0));
}
// y = x·(keep ? 1/(1 − p) : 0), the scale rounded to fp32 once.
inline Vec dropout_ref(const Vec& x, float p, uint64_t seed) {
  const float s = 1.0f / (1.0f - p);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * (dropout_keep_ref(seed, int64_t(i), p) ? s : 0.0f);
  return y;
}

}  // namespace ops_check
