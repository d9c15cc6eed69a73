// Causal attention that keeps no T×T matrix (the table's flash_attention_* entries), in fp32:
// one thread per query row (forward, dq) or key row (dk, dv) of one (sequence, head) pair,
// streaming the other side's rows with an online softmax (FlashAttention's recurrence).
//
// Indices run pair-major, so the 32 threads of a warp are 32 neighbouring rows of one pair and
// read the same key (or query) row at the same time: one broadcast load serves the warp. No
// shared memory and no tensor cores: this is the exact-fp32 path, memory O(T) per pair; the
// 16-bit path goes to cuDNN's fused attention where a GPU has it.
//
// Head widths 32, 64 and 128 are compiled with their width fixed so the per-thread vectors
// stay in registers; other widths up to kMaxHeadDim take a generic loop (slower, same result).
#include "kernels/cuda/ops_kernels.h"
#include "kernels/ops_math.h"

#include <cmath>

namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {

DSCPP_HD inline float log_f(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}

struct Pair {
  const float* qkv;
  int64_t T, heads, C;  // C = heads·head_dim
  // Row t of part (0 q, 1 k, 2 v) of pair p.
  DSCPP_HD int64_t offset(int64_t p, int64_t t, int part, int64_t D) const {
    return ((p / heads) * T + t) * 3 * C + part * C + (p % heads) * D;
  }
  // Row t of pair p in a batch × T × C tensor (out, dout).
  DSCPP_HD int64_t out_offset(int64_t p, int64_t t, int64_t D) const {
    return ((p / heads) * T + t) * C + (p % heads) * D;
  }
};

template <int kD>
struct Width {
  static constexpr int kMax = kD;
  DSCPP_HD static int get(int) { return kD; }
};
struct AnyWidth {
  static constexpr int kMax = kMaxHeadDim;
  DSCPP_HD static int get(int d) { return d; }
};

DSCPP_HD inline float dot(const float* a, const float* b, int D) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

// Query row i = p·T + t: out_t = Σ_{s≤t} softmax_s(scale·q_t·k_s)·v_s, lse_t = log Σ_{s≤t} e^(scale·q_t·k_s).
template <class W>
struct FlashForward {
  Pair pair;
  float* lse;
  float* out;
  int D;
  float scale;
  DSCPP_HD void operator()(int64_t i) const {
    const int n = W::get(D);
    const int64_t p = i / pair.T, t = i % pair.T;
    float q[W::kMax], acc[W::kMax];
    const float* qt = pair.qkv + pair.offset(p, t, 0, n);
    for (int d = 0; d < n; ++d) q[d] = qt[d] * scale, acc[d] = 0.0f;
    float m = -3.402823466e38f, l = 0.0f;
    for (int64_t s = 0; s <= t; ++s) {
      const float* ks = pair.qkv + pair.offset(p, s, 1, n);
      const float* vs = ks + pair.C;
      const float x = dot(q, ks, n);
      if (x > m) {  // a new maximum: rescale what was summed against the old one
        const float c = hd::exp_f(m - x);
        l *= c;
        for (int d = 0; d < n; ++d) acc[d] *= c;
        m = x;
      }
      const float e = hd::exp_f(x - m);
      l += e;
      for (int d = 0; d < n; ++d) acc[d] += e * vs[d];
    }
    const float inv = 1.0f / l;
    float* ot = out + pair.out_offset(p, t, n);
    for (int d = 0; d < n; ++d) ot[d] = acc[d] * inv;
    lse[i] = m + log_f(l);
  }
};

// Query row i: delta_t = Σ dout_t·out_t (kept for the key pass), and
// dq_t = scale·Σ_{s≤t} p_ts·(dout_t·v_s − delta_t)·k_s with p_ts = e^(scale·q_t·k_s − lse_t).
template <class W>
struct FlashBackwardQuery {
  Pair pair;
  const float *out, *lse, *dout;
  float *dqkv, *delta;
  int D;
  float scale;
  DSCPP_HD void operator()(int64_t i) const {
    const int n = W::get(D);
    const int64_t p = i / pair.T, t = i % pair.T;
    float q[W::kMax], g[W::kMax], dq[W::kMax];
    const float* qt = pair.qkv + pair.offset(p, t, 0, n);
    const float* gt = dout + pair.out_offset(p, t, n);
    const float* ot = out + pair.out_offset(p, t, n);
    float dt = 0.0f;
    for (int d = 0; d < n; ++d) q[d] = qt[d] * scale, g[d] = gt[d], dq[d] = 0.0f, dt += gt[d] * ot[d];
    delta[i] = dt;
    const float l = lse[i];
    for (int64_t s = 0; s <= t; ++s) {
      const float* ks = pair.qkv + pair.offset(p, s, 1, n);
      const float pr = hd::exp_f(dot(q, ks, n) - l);
      const float ds = pr * (dot(g, ks + pair.C, n) - dt);
      for (int d = 0; d < n; ++d) dq[d] += ds * ks[d];
    }
    float* out_q = dqkv + pair.offset(p, t, 0, n);
    for (int d = 0; d < n; ++d) out_q[d] = dq[d] * scale;
  }
};

// Key row i = p·T + s: dv_s = Σ_{t≥s} p_ts·dout_t, dk_s = scale·Σ_{t≥s} p_ts·(dout_t·v_s − delta_t)·q_t.
template <class W>
struct FlashBackwardKey {
  Pair pair;
  const float *lse, *dout, *delta;
  float* dqkv;
  int D;
  float scale;
  DSCPP_HD void operator()(int64_t i) const {
    const int n = W::get(D);
    const int64_t p = i / pair.T, s = i % pair.T;
    float k[W::kMax], v[W::kMax], dk[W::kMax], dv[W::kMax];
    const float* ks = pair.qkv + pair.offset(p, s, 1, n);
    for (int d = 0; d < n; ++d) k[d] = ks[d] * scale, v[d] = ks[pair.C + d], dk[d] = 0.0f, dv[d] = 0.0f;
    const int64_t row0 = p * pair.T;
    for (int64_t t = s; t < pair.T; ++t) {
      const float* qt = pair.qkv + pair.offset(p, t, 0, n);
      const float* gt = dout + pair.out_offset(p, t, n);
      const float pr = hd::exp_f(dot(k, qt, n) - lse[row0 + t]);
      const float ds = pr * (dot(v, gt, n) - delta[row0 + t]);
      for (int d = 0; d < n; ++d) dv[d] += pr * gt[d], dk[d] += ds * qt[d];
    }
    float* out_k = dqkv + pair.offset(p, s, 1, n);
    for (int d = 0; d < n; ++d) out_k[d] = dk[d] * scale, out_k[pair.C + d] = dv[d];
  }
};

// Runs Body<W> for the width class of D.
template <template <class> class Body, class Make>
Status by_width(int64_t rows, int D, Stream s, Make make) {
  switch (D) {
    case 32: return launch_per_index(rows, s, make(Body<Width<32>>{}));
    case 64: return launch_per_index(rows, s, make(Body<Width<64>>{}));
    case 128: return launch_per_index(rows, s, make(Body<Width<128>>{}));
    default: return launch_per_index(rows, s, make(Body<AnyWidth>{}));
  }
}

}  // namespace

Status flash_attention_forward(const float* qkv, float* lse, float* out, int64_t batch, int64_t T, int64_t heads,
                               int head_dim, float scale, Stream s) {
  const Pair pair{qkv, T, heads, heads * head_dim};
  return by_width<FlashForward>(batch * heads * T, head_dim, s, [&](auto body) {
    body.pair = pair, body.lse = lse, body.out = out, body.D = head_dim, body.scale = scale;
    return body;
  });
}

Status flash_attention_backward(const float* qkv, const float* out, const float* lse, const float* dout, float* dqkv,
                                float* delta, int64_t batch, int64_t T, int64_t heads, int head_dim, float scale,
                                Stream s) {
  const Pair pair{qkv, T, heads, heads * head_dim};
  const int64_t rows = batch * heads * T;
  if (Status st = by_width<FlashBackwardQuery>(rows, head_dim, s, [&](auto body) {
        body.pair = pair, body.out = out, body.lse = lse, body.dout = dout, body.dqkv = dqkv, body.delta = delta;
        body.D = head_dim, body.scale = scale;
        return body;
      });
      st != kOk)
    return st;
  return by_width<FlashBackwardKey>(rows, head_dim, s, [&](auto body) {
    body.pair = pair, body.lse = lse, body.dout = dout, body.delta = delta, body.dqkv = dqkv;
    body.D = head_dim, body.scale = scale;
    return body;
  });
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
