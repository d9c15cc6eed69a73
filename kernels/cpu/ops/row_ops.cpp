// Row-wise ops of the CPU ops table: layer norm, softmax, causal softmax, embedding and
// softmax cross-entropy. Rows are split across the pool; per-parameter reductions (dgamma,
// dbeta, dtable) are split across columns instead, so every thread owns the gradient slice it
// adds to and each column is summed in row order: results do not depend on the thread count.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dscpp::kernels::cpu {
namespace {


constexpr int64_t kTile = 256;  // columns of a reduction tile kept on the stack

// Row ops that call exp_f cost ~20 flops per element; their chunks can be smaller.
constexpr int64_t kExpGrain = kGrainElements / 4;

// max over i of a·x[i] (a > 0 keeps the order; any a is correct since it is applied first).
DSCPP_SIMD float row_max_scaled(const float* x, float a, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = std::max(m, a * x[i]);
  return m;
}

// y[i] = exp(a·x[i] − m); returns Σ y.
DSCPP_SIMD float row_exp(const float* x, float a, float m, float* y, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const float e = hd::softmax_exp(x[i], a, m);
    y[i] = e;
    s += e;
  }
  return s;
}

DSCPP_SIMD void row_scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

DSCPP_SIMD float row_dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// dx = a·y·(dy − dot): the softmax backward of one row, scaled by a.
DSCPP_SIMD void row_softmax_bwd(const float* y, const float* dy, float dot, float a, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = hd::softmax_grad(y[i], dy[i], dot, a);
}

// ---- layer norm ----------------------------------------------------------------------------

DSCPP_SIMD void ln_fwd_k(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t cols, float eps) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += xr[c];
    const float m = s * inv_n;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < cols; ++c) v += hd::layernorm_sq_dev(xr[c], m);
    const float rs = hd::layernorm_rstd(v, inv_n, eps);
    for (int64_t c = 0; c < cols; ++c) yr[c] = hd::layernorm_out(xr[c], m, rs, g[c], b[c]);
    mean[r] = m;
    rstd[r] = rs;
  }
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·gamma, x̂ = (x − mean)·rstd.
DSCPP_SIMD void ln_bwd_dx_k(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                            float* dx, int64_t rows, int64_t cols) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t c = 0; c < cols; ++c) {
      const float gc = dyr[c] * gamma[c];
      sg += gc;
      sgx += gc * hd::layernorm_xhat(xr[c], m, rs);
    }
    const float a = sg * inv_n, b = sgx * inv_n;
    for (int64_t c = 0; c < cols; ++c) dxr[c] = hd::layernorm_dx(dyr[c], xr[c], gamma[c], m, rs, a, b);
  }
}

// dgamma[c] += Σ_r dy·x̂, dbeta[c] += Σ_r dy for columns [c0, c1).
DSCPP_SIMD void ln_bwd_params_k(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                                float* dbeta, int64_t rows, int64_t cols, int64_t c0, int64_t c1) {
  float ag[kTile], ab[kTile];
  for (int64_t t0 = c0; t0 < c1; t0 += kTile) {
    const int64_t w = std::min(kTile, c1 - t0);
    for (int64_t j = 0; j < w; ++j) ag[j] = ab[j] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * cols + t0;
      const float* xr = x + r * cols + t0;
      const float m = mean[r], rs = rstd[r];
      for (int64_t j = 0; j < w; ++j) {
        ag[j] += dyr[j] * hd::layernorm_xhat(xr[j], m, rs);
        ab[j] += dyr[j];
      }
    }
    for (int64_t j = 0; j < w; ++j) {
      dgamma[t0 + j] += ag[j];
      dbeta[t0 + j] += ab[j];
    }
  }
}

int check_rows(int64_t rows, int64_t cols) { return rows < 0 || cols < 0 ? DSCPP_E_INVALID_ARGUMENT : DSCPP_OK; }

// ---- embedding -------------------------------------------------------------------------------

DSCPP_SIMD void add_to(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// ---- softmax cross-entropy ---------------------------------------------------------------

bool targets_valid(const int32_t* targets, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] >= cols) return false;
  return true;
}

DSCPP_SIMD void ce_bwd_row(const float* p, float a, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = hd::cross_entropy_grad(p[i], false, a);
}

}  // namespace

namespace op {

int layernorm_forward(const dscpp_ops* o, const void* x, const void* gamma, const void* beta, void* y, float* mean,
                      float* rstd, int64_t rows, int64_t cols, float eps) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (check_rows(rows, cols) || (cols == 0 && rows > 0) || bad_ptr(x, n) || bad_ptr(y, n) || bad_ptr(gamma, cols) ||
      bad_ptr(beta, cols) || bad_ptr(mean, rows) || bad_ptr(rstd, rows) || !(eps >= 0.0f))
    return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(x);
  const auto* pg = static_cast<const float*>(gamma);
  const auto* pb = static_cast<const float*>(beta);
  auto* py = static_cast<float*>(y);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    ln_fwd_k(px + r0 * cols, pg, pb, py + r0 * cols, mean + r0, rstd + r0, r1 - r0, cols, eps);
  });
  return DSCPP_OK;
}

int layernorm_backward(const dscpp_ops* o, const void* dy, const void* x, const void* gamma, const float* mean,
                       const float* rstd, void* dx, void* dgamma, void* dbeta, int64_t rows, int64_t cols) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (check_rows(rows, cols) || bad_ptr(dy, n) || bad_ptr(x, n) || bad_ptr(dx, n) || bad_ptr(gamma, cols) ||
      bad_ptr(dgamma, cols) || bad_ptr(dbeta, cols) || bad_ptr(mean, rows) || bad_ptr(rstd, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* pdy = static_cast<const float*>(dy);
  const auto* px = static_cast<const float*>(x);
  const auto* pg = static_cast<const float*>(gamma);
  auto* pdx = static_cast<float*>(dx);
  auto* pdg = static_cast<float*>(dgamma);
  auto* pdb = static_cast<float*>(dbeta);
  // Parameter gradients first: dx may overwrite dy in place.
  dscpp::parallel_for(cols, row_grain(rows), [&](int64_t c0, int64_t c1) {
    ln_bwd_params_k(pdy, px, mean, rstd, pdg, pdb, rows, cols, c0, c1);
  }, kLineFloats);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    ln_bwd_dx_k(pdy + r0 * cols, px + r0 * cols, pg, mean + r0, rstd + r0, pdx + r0 * cols, r1 - r0, cols);
  });
  return DSCPP_OK;
}

// ---- softmax ---------------------------------------------------------------------------------

int softmax_forward(const dscpp_ops* o, const void* x, void* y, int64_t rows, int64_t cols) {
  if (int s = check_table(o)) return s;
  if (check_rows(rows, cols) || bad_ptr(x, rows * cols) || bad_ptr(y, rows * cols)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(x);
  auto* py = static_cast<float*>(y);
  dscpp::parallel_for(rows, row_grain(cols, kExpGrain), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) softmax_row(px + r * cols, 1.0f, py + r * cols, cols);
  });
  return DSCPP_OK;
}

int softmax_backward(const dscpp_ops* o, const void* y, const void* dy, void* dx, int64_t rows, int64_t cols) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (check_rows(rows, cols) || bad_ptr(y, n) || bad_ptr(dy, n) || bad_ptr(dx, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* py = static_cast<const float*>(y);
  const auto* pdy = static_cast<const float*>(dy);
  auto* pdx = static_cast<float*>(dx);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t off = r * cols;
      softmax_row_backward(py + off, pdy + off, 1.0f, pdx + off, cols);
    }
  });
  return DSCPP_OK;
}

// Row r of the groups·T rows is query t = r mod T; it sees keys 0..t and writes 0 beyond.
int causal_softmax_forward(const dscpp_ops* o, const void* scores, void* probs, int64_t groups, int64_t T,
                           float scale) {
  if (int s = check_table(o)) return s;
  const int64_t rows = groups * T;
  if (check_rows(groups, T) || bad_ptr(scores, rows * T) || bad_ptr(probs, rows * T)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(scores);
  auto* py = static_cast<float*>(probs);
  // A row averages T/2 live entries.
  dscpp::parallel_for(rows, row_grain(T / 2 + 1, kExpGrain), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T;
      float* yr = py + r * T;
      softmax_row(px + r * T, scale, yr, t + 1);
      std::fill(yr + t + 1, yr + T, 0.0f);
    }
  });
  return DSCPP_OK;
}

int causal_softmax_backward(const dscpp_ops* o, const void* probs, const void* dprobs, void* dscores, int64_t groups,
                            int64_t T, float scale) {
  if (int s = check_table(o)) return s;
  const int64_t rows = groups * T;
  if (check_rows(groups, T) || bad_ptr(probs, rows * T) || bad_ptr(dprobs, rows * T) || bad_ptr(dscores, rows * T))
    return DSCPP_E_INVALID_ARGUMENT;
  const auto* py = static_cast<const float*>(probs);
  const auto* pdy = static_cast<const float*>(dprobs);
  auto* pdx = static_cast<float*>(dscores);
  dscpp::parallel_for(rows, row_grain(T / 2 + 1), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T, off = r * T;
      softmax_row_backward(py + off, pdy + off, scale, pdx + off, t + 1);
      std::fill(pdx + off + t + 1, pdx + off + T, 0.0f);
    }
  });
  return DSCPP_OK;
}

int embedding_forward(const dscpp_ops* o, const int32_t* ids, const void* table, void* out, int64_t n, int64_t vocab,
                      int64_t dim) {
  if (int s = check_table(o)) return s;
  if (n < 0 || vocab < 0 || dim < 0 || bad_ptr(ids, n) || bad_ptr(out, n * dim) ||
      bad_ptr(table, n > 0 ? vocab * dim : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  if (!ids_in_range(ids, n, vocab)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* pt = static_cast<const float*>(table);
  auto* po = static_cast<float*>(out);
  const auto bytes = static_cast<size_t>(dim) * sizeof(float);
  dscpp::parallel_for(n, row_grain(dim, 4 * kGrainElements), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(po + i * dim, pt + int64_t{ids[i]} * dim, bytes);
  });
  return DSCPP_OK;
}

int embedding_backward(const dscpp_ops* o, const int32_t* ids, const void* dout, void* dtable, int64_t n,
                       int64_t vocab, int64_t dim) {
  if (int s = check_table(o)) return s;
  if (n < 0 || vocab < 0 || dim < 0 || bad_ptr(ids, n) || bad_ptr(dout, n * dim) ||
      bad_ptr(dtable, n > 0 ? vocab * dim : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  if (!ids_in_range(ids, n, vocab)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* pd = static_cast<const float*>(dout);
  auto* pt = static_cast<float*>(dtable);
  // Split by columns: repeated ids add into the same row, so rows cannot be split.
  dscpp::parallel_for(dim, row_grain(n), [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) add_to(pd + i * dim + c0, pt + int64_t{ids[i]} * dim + c0, c1 - c0);
  }, kLineFloats);
  return DSCPP_OK;
}

int cross_entropy_forward(const dscpp_ops* o, const void* logits, const int32_t* targets, void* probs, int64_t rows,
                          int64_t cols, double* loss_sum, int64_t* counted, int64_t* correct) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (check_rows(rows, cols) || (cols == 0 && rows > 0) || bad_ptr(logits, n) || bad_ptr(probs, n) ||
      bad_ptr(targets, rows) || !loss_sum || !counted || !correct)
    return DSCPP_E_INVALID_ARGUMENT;
  if (!targets_valid(targets, rows, cols)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(logits);
  auto* pp = static_cast<float*>(probs);
  // Per-row results, summed in row order afterwards: the fp64 total is the same for any
  // thread count.
  std::vector<double> loss(static_cast<size_t>(rows));
  std::vector<uint8_t> hit(static_cast<size_t>(rows));
  dscpp::parallel_for(rows, row_grain(cols, kExpGrain), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * cols;
      float* pr = pp + r * cols;
      const float m = row_max_scaled(xr, 1.0f, cols);
      const int32_t t = targets[r];
      // Taken from the logits before probs (possibly the same buffer) is written.
      const float xt = t >= 0 ? xr[t] : 0.0f;
      if (t >= 0) hit[r] = std::find(xr, xr + cols, m) - xr == t;  // ties: the first maximum
      const float s = row_exp(xr, 1.0f, m, pr, cols);
      row_scale(pr, 1.0f / s, cols);
      if (t >= 0) loss[r] = hd::cross_entropy_loss(s, xt, m);
    }
  });
  double sum = 0.0;
  int64_t c = 0, k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0) continue;
    sum += loss[r];
    ++c;
    k += hit[r];
  }
  *loss_sum = sum;
  *counted = c;
  *correct = k;
  return DSCPP_OK;
}

int cross_entropy_backward(const dscpp_ops* o, const void* probs, const int32_t* targets, void* dlogits, int64_t rows,
                           int64_t cols, float scale) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (check_rows(rows, cols) || bad_ptr(probs, n) || bad_ptr(dlogits, n) || bad_ptr(targets, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  if (!targets_valid(targets, rows, cols)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* pp = static_cast<const float*>(probs);
  auto* pd = static_cast<float*>(dlogits);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t t = targets[r];
      float* dr = pd + r * cols;
      if (t < 0) {
        std::fill(dr, dr + cols, 0.0f);
        continue;
      }
      const float pt = pp[r * cols + t];  // read before dlogits (which may be probs) changes
      ce_bwd_row(pp + r * cols, scale, dr, cols);
      dr[t] = hd::cross_entropy_grad(pt, true, scale);
    }
  });
  return DSCPP_OK;
}

}  // namespace op

float softmax_row(const float* x, float a, float* y, int64_t n) {
  if (n == 0) return -INFINITY;
  const float m = row_max_scaled(x, a, n);
  const float s = row_exp(x, a, m, y, n);
  row_scale(y, 1.0f / s, n);
  return m + std::log(s);
}

void softmax_row_backward(const float* y, const float* dy, float a, float* dx, int64_t n) {
  row_softmax_bwd(y, dy, row_dot(y, dy, n), a, dx, n);
}

}  // namespace dscpp::kernels::cpu
