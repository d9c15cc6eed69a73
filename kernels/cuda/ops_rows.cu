// Row kernels of the CUDA ops table: one warp (or, for rows over kWarpRowMax, one block) per
// row, the row statistics as reductions (launch.h), then every thread writes its strided share
// of the row.
#include "kernels/cuda/ops_kernels.h"
#include "kernels/cuda/softmax_row.h"
#include "kernels/ops_math.h"

namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {

DSCPP_HD inline double sum(int, double a, double b) {
  return a + b;
}

// Rounds: Σx, then Σ(x − mean)²; finish writes y, mean, rstd.
struct LayerNormFwd {
  static constexpr int kRounds = 2;
  Src x, gamma, beta;
  Dst y;
  float *mean, *rstd;
  int64_t cols;
  float eps;
  DSCPP_HD double partial(const Thread& t, int round, const double* totals) const {
    const Src xr = x + int64_t(t.block) * cols;
    const float m = static_cast<float>(totals[0] / double(cols));
    double acc = 0;
    for (int64_t c = t.thread; c < cols; c += t.threads) acc += round == 0 ? xr[c] : hd::layernorm_sq_dev(xr[c], m);
    return acc;
  }
  DSCPP_HD static double combine(int r, double a, double b) { return sum(r, a, b); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols;
    const float inv_n = 1.0f / static_cast<float>(cols);
    const float m = static_cast<float>(totals[0] / double(cols));
    const float rs = hd::layernorm_rstd(static_cast<float>(totals[1]), inv_n, eps);
    for (int64_t c = t.thread; c < cols; c += t.threads)
      y[off + c] = hd::layernorm_out(x[off + c], m, rs, gamma[c], beta[c]);
    if (t.thread == 0) mean[t.block] = m, rstd[t.block] = rs;
  }
};

// Rounds: Σ dy·γ, then Σ dy·γ·x̂; finish writes dx (which may be dy: every thread reads its
// elements before it writes them, and the sums are complete before anyone writes).
struct LayerNormDx {
  static constexpr int kRounds = 2;
  Src dy, x, gamma;
  const float *mean, *rstd;
  Dst dx;
  int64_t cols;
  DSCPP_HD double partial(const Thread& t, int round, const double*) const {
    const int64_t off = int64_t(t.block) * cols;
    const float m = mean[t.block], rs = rstd[t.block];
    double acc = 0;
    for (int64_t c = t.thread; c < cols; c += t.threads) {
      const float g = dy[off + c] * gamma[c];
      acc += round == 0 ? g : g * hd::layernorm_xhat(x[off + c], m, rs);
    }
    return acc;
  }
  DSCPP_HD static double combine(int r, double a, double b) { return sum(r, a, b); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols;
    const float inv_n = 1.0f / static_cast<float>(cols);
    const float mg = static_cast<float>(totals[0]) * inv_n, mgx = static_cast<float>(totals[1]) * inv_n;
    const float m = mean[t.block], rs = rstd[t.block];
    for (int64_t c = t.thread; c < cols; c += t.threads)
      dx[off + c] = hd::layernorm_dx(dy[off + c], x[off + c], gamma[c], m, rs, mg, mgx);
  }
};

// Rounds: Σx²; finish writes y and rstd.
struct RmsNormFwd {
  static constexpr int kRounds = 1;
  Src x, gamma;
  Dst y;
  float* rstd;
  int64_t cols;
  float eps;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const Src xr = x + int64_t(t.block) * cols;
    double acc = 0;
    for (int64_t c = t.thread; c < cols; c += t.threads) {
      const float v = xr[c];
      acc += v * v;
    }
    return acc;
  }
  DSCPP_HD static double combine(int r, double a, double b) { return sum(r, a, b); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols;
    const float rs = hd::layernorm_rstd(static_cast<float>(totals[0]), 1.0f / static_cast<float>(cols), eps);
    for (int64_t c = t.thread; c < cols; c += t.threads) y[off + c] = hd::rmsnorm_out(x[off + c], rs, gamma[c]);
    if (t.thread == 0) rstd[t.block] = rs;
  }
};

// Rounds: Σ dy·γ·x̂; finish writes dx (which may be dy, as in LayerNormDx).
struct RmsNormDx {
  static constexpr int kRounds = 1;
  Src dy, x, gamma;
  const float* rstd;
  Dst dx;
  int64_t cols;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const int64_t off = int64_t(t.block) * cols;
    const float rs = rstd[t.block];
    double acc = 0;
    for (int64_t c = t.thread; c < cols; c += t.threads) acc += dy[off + c] * gamma[c] * (x[off + c] * rs);
    return acc;
  }
  DSCPP_HD static double combine(int r, double a, double b) { return sum(r, a, b); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols;
    const float mgx = static_cast<float>(totals[0]) / static_cast<float>(cols), rs = rstd[t.block];
    for (int64_t c = t.thread; c < cols; c += t.threads)
      dx[off + c] = hd::rmsnorm_dx(dy[off + c], x[off + c], gamma[c], rs, mgx);
  }
};

DSCPP_HD inline int64_t live_cols(unsigned row, int64_t cols, bool causal) {
  return causal ? int64_t(row) % cols + 1 : cols;
}

// Rounds: max of a·x, then Σ e^(a·x − max); finish writes y (0 beyond the live entries).
struct SoftmaxFwd {
  static constexpr int kRounds = 2;
  Src x;
  Dst y;
  int64_t cols;
  float a;
  bool causal;
  DSCPP_HD double partial(const Thread& t, int round, const double* totals) const {
    return softmax_partial(x + int64_t(t.block) * cols, 0, live_cols(t.block, cols, causal), a, t, round, totals);
  }
  DSCPP_HD static double combine(int r, double p, double q) { return softmax_combine(r, p, q); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols;
    softmax_write(x + off, y + off, cols, 0, live_cols(t.block, cols, causal), a, totals, t);
  }
};

struct SoftmaxBwd {
  static constexpr int kRounds = 1;
  Src y, dy;
  Dst dx;
  int64_t cols;
  float a;
  bool causal;
  DSCPP_HD double partial(const Thread& t, int, const double*) const {
    const int64_t off = int64_t(t.block) * cols, live = live_cols(t.block, cols, causal);
    double acc = 0;
    for (int64_t c = t.thread; c < live; c += t.threads) acc += y[off + c] * dy[off + c];
    return acc;
  }
  DSCPP_HD static double combine(int r, double p, double q) { return sum(r, p, q); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols, live = live_cols(t.block, cols, causal);
    const float dot = static_cast<float>(totals[0]);
    for (int64_t c = t.thread; c < cols; c += t.threads)
      dx[off + c] = c < live ? hd::softmax_grad(y[off + c], dy[off + c], dot, a) : 0.0f;
  }
};

// Scores plus an additive bias as the softmax reads them: the sum in fp32, never stored, so a
// 16-bit table rounds once (on the probabilities) as the CPU table's fp32 sum does.
struct BiasedRow {
  Src x, bias;  // bias null: none
  DSCPP_HD float operator[](int64_t c) const { return bias == nullptr ? x[c] : x[c] + bias[c]; }
};

// Row r0 + block of batch·heads·Tq: query r mod Tq of sequence r / (heads·Tq), whose bias row is
// r mod heads·Tq. Rounds and finish as SoftmaxFwd's at scale 1, over the row's visible keys.
struct MaskedSoftmaxFwd {
  static constexpr int kRounds = 2;
  Src x, bias;
  Dst y;
  ScoreMasks m;
  int64_t r0, cols;  // cols = m.Tk, the name launch_rows reads
  // The keys row r sees: 0 … live − 1.
  DSCPP_HD int64_t live(int64_t r) const {
    int64_t n = m.Tk;
    if (m.key_len != nullptr) {
      const int64_t k = m.key_len[divmod(r, m.heads * m.Tq).quot * m.key_len_ld];
      n = k < 0 ? 0 : (k < n ? k : n);
    }
    if (m.causal) {
      const int64_t last = divmod(r, m.Tq).rem + m.Tk - m.Tq + 1;
      n = last < n ? last : n;
    }
    return n;
  }
  DSCPP_HD BiasedRow row(int64_t r) const {
    return {x + (r - r0) * m.Tk, bias == nullptr ? Src{} : bias + divmod(r, m.heads * m.Tq).rem * m.Tk};
  }
  DSCPP_HD double partial(const Thread& t, int round, const double* totals) const {
    const int64_t r = r0 + t.block;
    return softmax_partial(row(r), 0, live(r), 1.0f, t, round, totals);
  }
  DSCPP_HD static double combine(int r, double p, double q) { return softmax_combine(r, p, q); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t r = r0 + t.block;
    softmax_write(row(r), y + int64_t(t.block) * m.Tk, m.Tk, 0, live(r), 1.0f, totals, t);
  }
};

// Rounds: max, Σ e^(x − max), the first index holding the max, x[target] (only the owning
// thread contributes, so the sum is exact). Finish writes probs — which may be the logits,
// hence x[target] is taken in a round, before anyone writes.
struct CrossEntropyFwd {
  static constexpr int kRounds = 4;
  Src x;
  const int32_t* targets;
  Dst probs;
  double* loss;
  int32_t* hit;
  int64_t cols;
  DSCPP_HD double partial(const Thread& t, int round, const double* totals) const {
    const Src xr = x + int64_t(t.block) * cols;
    const float m = static_cast<float>(totals[0]);
    const int32_t target = targets[t.block];
    double acc = round == 0 ? -3.402823466e38 : (round == 2 ? double(cols) : 0.0);
    for (int64_t c = t.thread; c < cols; c += t.threads) {
      if (round == 0) acc = xr[c] > acc ? xr[c] : acc;
      if (round == 1) acc += hd::softmax_exp(xr[c], 1.0f, m);
      if (round == 2 && xr[c] == m && double(c) < acc) acc = double(c);
      if (round == 3 && c == target) acc = xr[c];
    }
    return acc;
  }
  DSCPP_HD static double combine(int r, double p, double q) {
    return r == 0 ? (p > q ? p : q) : (r == 2 ? (p < q ? p : q) : p + q);
  }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    const int64_t off = int64_t(t.block) * cols;
    const float m = static_cast<float>(totals[0]), s = static_cast<float>(totals[1]), inv = 1.0f / s;
    for (int64_t c = t.thread; c < cols; c += t.threads) probs[off + c] = hd::softmax_exp(x[off + c], 1.0f, m) * inv;
    if (t.thread == 0) {
      const int32_t target = targets[t.block];
      loss[t.block] = target < 0 ? 0.0 : hd::cross_entropy_loss(s, static_cast<float>(totals[3]), m);
      hit[t.block] = target >= 0 && int64_t(totals[2]) == target;
    }
  }
};

// Row-wise launches take a warp or a block per row (launch_rows); rows beyond the 2^31−1 grid
// limit go in slices (a warp-per-row slice's blocks are 8 times fewer, so it fits too).
template <class Body, class Shift>
Status per_row(int64_t rows, Stream s, Body body, Shift shift) {
  constexpr int64_t kMaxGrid = INT32_MAX;
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxGrid) {
    const int64_t n = rows - r0 < kMaxGrid ? rows - r0 : kMaxGrid;
    if (Status st = launch_rows(unsigned(n), body.cols, s, shift(body, r0)); st != kOk) return st;
  }
  return kOk;
}

}  // namespace

Status layernorm_forward(Src x, Src gamma, Src beta, Dst y, float* mean, float* rstd,
                         int64_t rows, int64_t cols, float eps, Stream s) {
  if (cols == 0) return kOk;
  return per_row(rows, s, LayerNormFwd{x, gamma, beta, y, mean, rstd, cols, eps}, [](LayerNormFwd b, int64_t r0) {
    b.x += r0 * b.cols, b.y += r0 * b.cols, b.mean += r0, b.rstd += r0;
    return b;
  });
}

Status layernorm_backward(Src dy, Src x, Src gamma, const float* mean, const float* rstd, Dst dx, Dst dgamma,
                          Dst dbeta, int64_t rows, int64_t cols, float* scratch, Stream s) {
  if (rows == 0 || cols == 0) return kOk;
  // Parameter gradients first: dx may overwrite dy.
  if (Status st = layernorm_param_grads(dy, x, mean, rstd, dgamma, dbeta, rows, cols, scratch, s); st != kOk) return st;
  return per_row(rows, s, LayerNormDx{dy, x, gamma, mean, rstd, dx, cols}, [](LayerNormDx b, int64_t r0) {
    b.dy += r0 * b.cols, b.x += r0 * b.cols, b.dx += r0 * b.cols, b.mean += r0, b.rstd += r0;
    return b;
  });
}

Status rmsnorm_forward(Src x, Src gamma, Dst y, float* rstd, int64_t rows, int64_t cols, float eps, Stream s) {
  if (cols == 0) return kOk;
  return per_row(rows, s, RmsNormFwd{x, gamma, y, rstd, cols, eps}, [](RmsNormFwd b, int64_t r0) {
    b.x += r0 * b.cols, b.y += r0 * b.cols, b.rstd += r0;
    return b;
  });
}

Status rmsnorm_backward(Src dy, Src x, Src gamma, const float* rstd, Dst dx, Dst dgamma, int64_t rows, int64_t cols,
                        float* scratch, Stream s) {
  if (rows == 0 || cols == 0) return kOk;
  // dgamma first: dx may overwrite dy.
  if (Status st = rmsnorm_param_grad(dy, x, rstd, dgamma, rows, cols, scratch, s); st != kOk) return st;
  return per_row(rows, s, RmsNormDx{dy, x, gamma, rstd, dx, cols}, [](RmsNormDx b, int64_t r0) {
    b.dy += r0 * b.cols, b.x += r0 * b.cols, b.dx += r0 * b.cols, b.rstd += r0;
    return b;
  });
}

Status softmax_forward(Src x, Dst y, int64_t rows, int64_t cols, float scale, bool causal, Stream s) {
  if (cols == 0) return kOk;
  // A causal slice must start on a matrix boundary for r mod T to stay right: the slices
  // are multiples of cols only when causal rows fit one grid (groups·T < 2^31), which the
  // table checks.
  return per_row(rows, s, SoftmaxFwd{x, y, cols, scale, causal}, [](SoftmaxFwd b, int64_t r0) {
    b.x += r0 * b.cols, b.y += r0 * b.cols;
    return b;
  });
}

Status softmax_backward(Src y, Src dy, Dst dx, int64_t rows, int64_t cols, float scale,
                        bool causal, Stream s) {
  if (cols == 0) return kOk;
  return per_row(rows, s, SoftmaxBwd{y, dy, dx, cols, scale, causal}, [](SoftmaxBwd b, int64_t r0) {
    b.y += r0 * b.cols, b.dy += r0 * b.cols, b.dx += r0 * b.cols;
    return b;
  });
}

Status masked_softmax_forward(Src scores, Src bias, Dst probs, const ScoreMasks& m, Stream s) {
  if (m.Tk == 0) return kOk;
  const MaskedSoftmaxFwd body{scores, bias, probs, m, 0, m.Tk};
  return per_row(m.batch * m.heads * m.Tq, s, body, [](MaskedSoftmaxFwd b, int64_t r0) {
    b.x += r0 * b.cols, b.y += r0 * b.cols, b.r0 = r0;
    return b;
  });
}

Status cross_entropy_forward(Src logits, const int32_t* targets, Dst probs, double* loss, int32_t* hit,
                             int64_t rows, int64_t cols, Stream s) {
  if (cols == 0) return kOk;
  return per_row(rows, s, CrossEntropyFwd{logits, targets, probs, loss, hit, cols}, [](CrossEntropyFwd b, int64_t r0) {
    b.x += r0 * b.cols, b.probs += r0 * b.cols, b.targets += r0, b.loss += r0, b.hit += r0;
    return b;
  });
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
