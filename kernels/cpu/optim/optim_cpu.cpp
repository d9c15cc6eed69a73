// Dispatcher and threading for the CPU optimizer loops; also the scalar span loops (this TU is
// compiled with the project's baseline flags only).
#include "kernels/cpu/optim/optim_cpu.h"

#include "core/error.h"
#include "core/knobs.h"
#include "core/thread_pool.h"
#include "kernels/cpu/optim/span_loops.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

namespace dscpp::kernels::cpu {

const SpanKernels& span_kernels_scalar() {
  static const SpanKernels k = make_span_kernels<Lane1>();
  return k;
}

namespace {

enum class Level { scalar = 0, avx2 = 1, avx512 = 2 };
constexpr const char* kLevelNames[] = {"scalar", "avx2", "avx512"};

bool cpu_supports(Level level) {
#if defined(DSCPP_OPTIM_X86)
  __builtin_cpu_init();
  switch (level) {
    case Level::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Level::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Level::scalar:
      return true;
  }
  return false;
#else
  return level == Level::scalar;
#endif
}

const SpanKernels& kernels_for(Level level) {
#if defined(DSCPP_OPTIM_X86)
  if (level == Level::avx512) return span_kernels_avx512();
  if (level == Level::avx2) return span_kernels_avx2();
#endif
  return span_kernels_scalar();
}

Level parse_level(const std::string& name) {
  for (int i = 0; i < 3; ++i)
    if (name == kLevelNames[i]) return static_cast<Level>(i);
  fail("optimizer SIMD level '{}' is not one of scalar, avx2, avx512", name);
}

// AVX2 by default even where AVX-512 exists: the update is memory-bound, and on the Xeon we
// develop on the 512-bit path reached 0.86–0.88× the fused-loop limit against 0.98× for AVX2
// (`bench_optimizer --all-levels`, 50M parameters, 2 threads). GCC makes the same call for
// skylake-avx512 (-mprefer-vector-width=256). DSCPP_OPTIM_SIMD=avx512 opts in.
Level best_level() {
  for (Level l : {Level::avx2})
    if (cpu_supports(l)) return l;
  return Level::scalar;
}

// The selected level, chosen once (first use) unless a test or benchmark forces another.
std::atomic<int>& level_slot() {
  static std::atomic<int> slot = [] {
    Level level = best_level();
    if (const char* env = knob("DSCPP_OPTIM_SIMD"); env && *env) {
      Level wanted = parse_level(env);
      if (cpu_supports(wanted)) level = wanted;
    }
    return static_cast<int>(level);
  }();
  return slot;
}

const SpanKernels& active() { return kernels_for(static_cast<Level>(level_slot().load(std::memory_order_relaxed))); }

// Chunks of at least this many elements per thread; chunk starts stay 64-element (256-byte)
// aligned relative to the array so vectors never straddle two threads' chunks.
constexpr int64_t kGrain = 1 << 14;
constexpr int64_t kAlign = 64;

}  // namespace

std::string optimizer_simd_level() { return kLevelNames[level_slot().load()]; }

std::vector<std::string> optimizer_simd_levels() {
  std::vector<std::string> out;
  for (Level l : {Level::avx512, Level::avx2, Level::scalar})
    if (cpu_supports(l)) out.push_back(kLevelNames[static_cast<int>(l)]);
  return out;
}

void set_optimizer_simd_level(const std::string& name) {
  Level level = parse_level(name);
  if (!cpu_supports(level)) fail("optimizer SIMD level '{}' is not available on this CPU/build", name);
  level_slot().store(static_cast<int>(level));
}

void adam_step(float* w, const float* g, float* m, float* v, int64_t n, const AdamCoeffs<float>& c) {
  auto fn = active().adam;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { fn(w + b, g + b, m + b, v + b, e - b, c); }, kAlign);
}

void sgd_step(float* w, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c) {
  auto fn = active().sgd;
  parallel_for(
      n, kGrain, [&](int64_t b, int64_t e) { fn(w + b, g + b, c.has_momentum ? buf + b : nullptr, e - b, c); }, kAlign);
}

void adagrad_step(float* w, const float* g, float* sum, int64_t n, const AdagradCoeffs<float>& c) {
  auto fn = active().adagrad;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { fn(w + b, g + b, sum + b, e - b, c); }, kAlign);
}

void lion_step(float* w, const float* g, float* m, int64_t n, const LionCoeffs<float>& c) {
  auto fn = active().lion;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { fn(w + b, g + b, m + b, e - b, c); }, kAlign);
}

void traffic_step(float* w, const float* g, float* m, float* v, int64_t n) {
  auto fn = active().traffic;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { fn(w + b, g + b, m + b, v + b, e - b); }, kAlign);
}

namespace {

// Calls fn(segment, begin, end) for each non-empty intersection of [b, e) with a segment.
template <class F>
void for_each_piece(const std::vector<int64_t>& bounds, int64_t b, int64_t e, F&& fn) {
  size_t s = static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), b) - bounds.begin()) - 1;
  for (; s + 1 < bounds.size() && bounds[s] < e; ++s) {
    int64_t lo = std::max(b, bounds[s]), hi = std::min(e, bounds[s + 1]);
    if (lo < hi) fn(s, lo, hi);
  }
}

// Σw², Σu² of a piece, summed in blocks so that accumulation order is fixed by the piece.
constexpr int64_t kLambBlock = 4096;

}  // namespace

void lamb_step(float* w, const float* g, float* m, float* v, const std::vector<int64_t>& bounds,
               const LambCoeffs<float>& c, double step_size, double min_coeff, double max_coeff,
               std::vector<double>* ratios) {
  if (bounds.size() < 2 || bounds.front() != 0) fail("lamb_step: segment bounds must start at 0 and be non-empty");
  for (size_t i = 1; i < bounds.size(); ++i)
    if (bounds[i] < bounds[i - 1]) fail("lamb_step: segment bounds must be non-decreasing");
  const int64_t n = bounds.back();
  const size_t nseg = bounds.size() - 1;
  const SpanKernels& k = active();

  // Pass 1: moments, and per-piece sums. Pieces are recorded with their start so the per-
  // segment totals are added in a fixed order (deterministic for a given thread count).
  struct Partial {
    size_t seg;
    int64_t begin;
    double w_sq, u_sq;
  };
  std::vector<Partial> partials;
  std::mutex mu;
  parallel_for(
      n, kGrain,
      [&](int64_t b, int64_t e) {
        std::vector<Partial> local;
        for_each_piece(bounds, b, e, [&](size_t s, int64_t lo, int64_t hi) {
          Partial p{s, lo, 0.0, 0.0};
          for (int64_t i = lo; i < hi; i += kLambBlock) {
            int64_t len = std::min(kLambBlock, hi - i);
            k.lamb_moments(w + i, g + i, m + i, v + i, len, c, &p.w_sq, &p.u_sq);
          }
          local.push_back(p);
        });
        std::lock_guard lock(mu);
        partials.insert(partials.end(), local.begin(), local.end());
      },
      kAlign);
  std::sort(partials.begin(), partials.end(),
            [](const Partial& a, const Partial& b) { return a.seg != b.seg ? a.seg < b.seg : a.begin < b.begin; });
  std::vector<double> w_sq(nseg, 0.0), u_sq(nseg, 0.0);
  for (const Partial& p : partials) {
    w_sq[p.seg] += p.w_sq;
    u_sq[p.seg] += p.u_sq;
  }

  // Pass 2: trust ratio per segment, then the update.
  std::vector<float> neg_step(nseg);
  if (ratios) ratios->assign(nseg, 1.0);
  for (size_t s = 0; s < nseg; ++s) {
    double r = lamb_trust_ratio(std::sqrt(w_sq[s]), std::sqrt(u_sq[s]), min_coeff, max_coeff);
    neg_step[s] = static_cast<float>(-step_size * r);
    if (ratios) (*ratios)[s] = r;
  }
  parallel_for(
      n, kGrain,
      [&](int64_t b, int64_t e) {
        for_each_piece(bounds, b, e, [&](size_t s, int64_t lo, int64_t hi) {
          k.lamb_apply(w + lo, m + lo, v + lo, hi - lo, neg_step[s], c);
        });
      },
      kAlign);
}

}  // namespace dscpp::kernels::cpu
