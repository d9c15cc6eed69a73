// Element math of the model ops table shared by the CPU loops (kernels/cpu/ops) and the CUDA
// kernels (kernels/cuda/ops.cu): exp, GELU and its derivative, the layer-norm, softmax and
// cross-entropy element formulas, SiLU, RMSNorm, the embedding row address, T5's position buckets
// and dropout's counter-based mask.
//
// Each function is one element (or one row scalar) in fp32 with a fixed operation order, so a
// vectorised CPU lane, the scalar CPU tail and a CUDA thread evaluate the same expression. The
// row reductions (max, Σexp, mean, variance, dot) stay in the callers: their summation order is
// the one thing that differs between a SIMD reduction and a warp reduction.
#pragma once

#include "core/half.h"
#include "kernels/hd.h"

#include <cmath>
#include <cstdint>

namespace dscpp::hd {

// exp(x) in float without libm, so that loops calling it vectorise (glibc's vector expf is
// only reachable with -ffast-math) and so that the device computes the same value (CUDA's
// expf differs from glibc's in the last ulp). n = round(x/ln2), r = x − n·ln2 in two parts
// (|r| ≤ 0.35), e^r by its Taylor polynomial to r^7 (truncation < 6e-9 relative), times 2^n
// built in the exponent bits. Max relative error ≈ 2 ulp. Inputs are clamped to
// [−87.3, 88.3], so the result is a normal float: exp of anything below −87.3 comes out as
// ~1e−38, not 0.
DSCPP_HD inline float exp_f(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  // Adding and subtracting 1.5·2^23 rounds to the nearest integer (|t| < 2^22 here).
  float t = x * 1.44269504088896341f;
  float n = (t + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  auto bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return p * bits_to_float(bits);
}

// Natural log, the platform's (logf on the device): used for log-sum-exp statistics, which
// the tables compare within tolerances, not bit for bit.
DSCPP_HD inline float log_f(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}

// GELU (tanh form) as x·sigmoid(2u), u = √(2/π)(x + a·x³): 0.5·(1 + tanh(u)) = 1/(1 + e^(−2u)).
// One exp instead of a tanh, and no cancellation in 1 + tanh(u) for large negative u.
constexpr float kGeluC = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluA = 0.044715f;

DSCPP_HD inline float gelu(float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  return x / (1.0f + exp_f(-2.0f * u));
}

// d/dx [x·s(2u)] = s + x·2s(1−s)·u', with s = sigmoid(2u), u' = √(2/π)(1 + 3a·x²).
DSCPP_HD inline float gelu_grad(float x) {
  const float u = kGeluC * (x + kGeluA * x * x * x);
  const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
  const float s = 1.0f / (1.0f + exp_f(-2.0f * u));
  return s + 2.0f * x * s * (1.0f - s) * du;
}

// ---- layer norm (per row: mean m, rstd = 1/sqrt(Σ(x−m)²/n + ε)) --------------------------

// Two-pass variance (Σ(x−m)² rather than Σx² − m²): the caller sums these, so there is no
// cancellation when |mean| ≫ std.
DSCPP_HD inline float layernorm_sq_dev(float x, float mean) {
  return (x - mean) * (x - mean);
}

DSCPP_HD inline float layernorm_rstd(float sum_sq_dev, float inv_n, float eps) {
  return 1.0f / hd_sqrt(sum_sq_dev * inv_n + eps);
}

DSCPP_HD inline float layernorm_out(float x, float mean, float rstd, float gamma, float beta) {
  return (x - mean) * rstd * gamma + beta;
}

// x̂ = (x − mean)·rstd: the factor dgamma accumulates (Σ dy·x̂) and the backward's mean(g·x̂).
DSCPP_HD inline float layernorm_xhat(float x, float mean, float rstd) {
  return (x - mean) * rstd;
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·gamma; mean_g and mean_gx are the row means.
DSCPP_HD inline float layernorm_dx(float dy, float x, float gamma, float mean, float rstd, float mean_g,
                                   float mean_gx) {
  return rstd * (dy * gamma - mean_g - (x - mean) * rstd * mean_gx);
}

// ---- softmax (per row: y = softmax(a·x)) -------------------------------------------------

// e^(a·x − max): the caller sums these and scales by 1/Σ.
DSCPP_HD inline float softmax_exp(float x, float a, float max) {
  return exp_f(a * x - max);
}

// dx = a·y·(dy − Σ y·dy).
DSCPP_HD inline float softmax_grad(float y, float dy, float dot, float a) {
  return a * y * (dy - dot);
}

// ---- softmax cross-entropy --------------------------------------------------------------

// −log p[t] from the logits (log-sum-exp), not from p[t], which can underflow: log Σe^(x−m) −
// (x_t − m), in double like the loss sum it is added to.
DSCPP_HD inline double cross_entropy_loss(float sum_exp, float x_target, float max) {
  return ::log(static_cast<double>(sum_exp)) - (static_cast<double>(x_target) - max);
}

// d loss / d logit = scale·(p − [i = t]).
DSCPP_HD inline float cross_entropy_grad(float p, bool is_target, float scale) {
  return is_target ? scale * (p - 1.0f) : scale * p;
}

// ---- embedding ----------------------------------------------------------------------------

// ---- SiLU and SwiGLU (σ(x) = 1/(1 + e^(−x))) ------------------------------------------------

DSCPP_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + exp_f(-x));
}

DSCPP_HD inline float silu(float x) {
  return x * sigmoid(x);
}

// d/dx [x·σ(x)] = σ + x·σ(1 − σ) = σ·(1 + x·(1 − σ)).
DSCPP_HD inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

// ---- RMSNorm (per row: rstd = 1/sqrt(Σx²/n + ε), the layer norm's rstd of a zero mean) ---------

DSCPP_HD inline float rmsnorm_out(float x, float rstd, float gamma) {
  return (x * rstd) * gamma;
}

// dx = rstd·(g − x̂·mean(g·x̂)) with g = dy·gamma, x̂ = x·rstd; mean_gx is the row mean of g·x̂.
DSCPP_HD inline float rmsnorm_dx(float dy, float x, float gamma, float rstd, float mean_gx) {
  return rstd * (dy * gamma - (x * rstd) * mean_gx);
}

// Offset of row `id` in a [vocab, dim] table, or −1 when the id is out of range (the ops
// reject the whole batch before writing anything).
DSCPP_HD inline int64_t embedding_row(int32_t id, int64_t vocab, int64_t dim) {
  return id < 0 || id >= vocab ? -1 : int64_t{id} * dim;
}

// ---- T5's relative position buckets ---------------------------------------------------------

// transformers' _relative_position_bucket of n = key position − query position. The logarithm is
// taken in double and rounded to float, so the CPU and a CUDA thread agree, and then the
// arithmetic is torch's fp32: (float)(d/e) → log → / (float)log(max_distance/e) → · (B − e) →
// truncated. At the bucket edges (d/e an exact power) the quotient is exact either way.
DSCPP_HD inline int32_t relative_bucket(int64_t n, bool bidirectional, int32_t num_buckets, int32_t max_distance) {
  int32_t buckets = num_buckets, base = 0;
  int64_t d = 0;
  if (bidirectional) {
    buckets /= 2;
    if (n > 0) base = buckets;
    d = n > 0 ? n : -n;
  } else {
    d = n < 0 ? -n : 0;
  }
  const int32_t exact = buckets / 2;
  if (d < exact) return base + static_cast<int32_t>(d);
  const float ratio = static_cast<float>(d) / static_cast<float>(exact);
  const float scale = static_cast<float>(::log(static_cast<double>(max_distance) / exact));
  const float v = static_cast<float>(::log(static_cast<double>(ratio))) / scale * static_cast<float>(buckets - exact);
  const int64_t large = exact + static_cast<int64_t>(v);
  return base + static_cast<int32_t>(large < buckets - 1 ? large : buckets - 1);
}

// ---- dropout (model.h's dropout: a counter-based mask, nothing stored) ------------------------

// SplitMix64's step and output function in one (Steele, Lea & Flood, 2014): a bijection of 64 bits
// whose outputs at consecutive states pass BigCrush. Integer operations only, so a CPU lane and a
// CUDA thread give the same bits.
constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;
DSCPP_HD constexpr uint64_t splitmix64(uint64_t z) {
  z += kSplitMixGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One call's draw: the seed is hashed once into the generator's starting state, so nearby seeds
// (one per layer and micro-step) start streams ~2⁶⁴ apart, and element i takes output i.
struct DropoutDraw {
  uint64_t key;        // splitmix64(seed)
  uint32_t threshold;  // ⌊p·2³²⌋: an element is kept when the high 32 bits of its output reach it
  float scale;         // 1/(1 − p) in fp32, the one rounding every table applies
};
// p in [0, 1) (kernels/ops_args.h's dropout_p_ok), so ⌊p·2³²⌋ < 2³² (in double: exact).
inline DropoutDraw dropout_draw(float p, uint64_t seed) {
  return {splitmix64(seed), static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0), 1.0f / (1.0f - p)};
}
DSCPP_HD inline bool dropout_keep(uint64_t key, int64_t i, uint32_t threshold) {
  return (splitmix64(key + static_cast<uint64_t>(i) * kSplitMixGamma) >> 32) >= threshold;
}
// x·s or x·0 (not a select), as torch multiplies by its mask: a dropped NaN stays NaN.
DSCPP_HD inline float dropout(float x, const DropoutDraw& d, int64_t i) {
  return x * (dropout_keep(d.key, i, d.threshold) ? d.scale : 0.0f);
}

}  // namespace dscpp::hd
