// RMSNorm and rotary position embeddings of the CPU ops table (Llama-style models). Rows are
// split across the pool; RMSNorm's dgamma is split across columns as the layer norm's is, so
// every thread owns its gradient slice and each column is summed in row order.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/rope_math.h"

#include <algorithm>

namespace dscpp::kernels::cpu {
namespace {

constexpr int64_t kTile = 256;  // columns of a reduction tile kept on the stack

DSCPP_SIMD void rms_fwd_k(const float* x, const float* g, float* y, float* rstd, int64_t rows, int64_t cols,
                          float eps) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < cols; ++c) v += xr[c] * xr[c];
    const float rs = hd::layernorm_rstd(v, inv_n, eps);
    for (int64_t c = 0; c < cols; ++c) yr[c] = hd::rmsnorm_out(xr[c], rs, g[c]);
    rstd[r] = rs;
  }
}

DSCPP_SIMD void rms_bwd_dx_k(const float* dy, const float* x, const float* gamma, const float* rstd, float* dx,
                             int64_t rows, int64_t cols) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float rs = rstd[r];
    float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
    for (int64_t c = 0; c < cols; ++c) sgx += dyr[c] * gamma[c] * (xr[c] * rs);
    const float mgx = sgx * inv_n;
    for (int64_t c = 0; c < cols; ++c) dxr[c] = hd::rmsnorm_dx(dyr[c], xr[c], gamma[c], rs, mgx);
  }
}

// dgamma[c] += Σ_r dy·x·rstd for columns [c0, c1).
DSCPP_SIMD void rms_bwd_gamma_k(const float* dy, const float* x, const float* rstd, float* dgamma, int64_t rows,
                                int64_t cols, int64_t c0, int64_t c1) {
  float acc[kTile];
  for (int64_t t0 = c0; t0 < c1; t0 += kTile) {
    const int64_t w = std::min(kTile, c1 - t0);
    for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * cols + t0;
      const float* xr = x + r * cols + t0;
      const float rs = rstd[r];
      for (int64_t j = 0; j < w; ++j) acc[j] += dyr[j] * (xr[j] * rs);
    }
    for (int64_t j = 0; j < w; ++j) dgamma[t0 + j] += acc[j];
  }
}

int rope(const dscpp_ops* o, void* x, int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim,
         const int32_t* positions, int64_t pos0, const dscpp_rope* r, bool backward) {
  if (int s = check_table(o)) return s;
  hd::RopeTable table;
  if (!hd::rope_args(batch, T, width, heads, head_dim, pos0, r, &table)) return DSCPP_E_INVALID_ARGUMENT;
  const int64_t rows = batch * T;
  if (rows == 0 || heads == 0) return DSCPP_OK;
  if (x == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  if (positions != nullptr)
    for (int64_t i = 0; i < rows; ++i)
      if (positions[i] < 0) return DSCPP_E_INVALID_ARGUMENT;
  auto* px = static_cast<float*>(x);
  dscpp::parallel_for(rows, std::max<int64_t>(1, kGrainElements / (8 * heads * head_dim)), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t pos = positions != nullptr ? positions[row] : pos0 + row % T;
      float* xr = px + row * width;
      for (int32_t i = 0; i < table.pairs; ++i) {
        const float angle = hd::rope_angle(table, pos, i);
        const int32_t a = hd::rope_first(table, i), b = hd::rope_second(table, i);
        for (int64_t h = 0; h < heads; ++h)
          hd::rope_rotate(xr[h * head_dim + a], xr[h * head_dim + b], angle, backward);
      }
    }
  });
  return DSCPP_OK;
}

}  // namespace

namespace op {

int rmsnorm_forward(const dscpp_ops* o, const void* x, const void* gamma, void* y, float* rstd, int64_t rows,
                    int64_t cols, float eps) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || (cols == 0 && rows > 0) || bad_ptr(x, n) || bad_ptr(y, n) || bad_ptr(gamma, cols) ||
      bad_ptr(rstd, rows) || !(eps >= 0.0f))
    return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(x);
  const auto* pg = static_cast<const float*>(gamma);
  auto* py = static_cast<float*>(y);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    rms_fwd_k(px + r0 * cols, pg, py + r0 * cols, rstd + r0, r1 - r0, cols, eps);
  });
  return DSCPP_OK;
}

int rmsnorm_backward(const dscpp_ops* o, const void* dy, const void* x, const void* gamma, const float* rstd, void* dx,
                     void* dgamma, int64_t rows, int64_t cols) {
  if (int s = check_table(o)) return s;
  const int64_t n = rows * cols;
  if (rows < 0 || cols < 0 || bad_ptr(dy, n) || bad_ptr(x, n) || bad_ptr(dx, n) || bad_ptr(gamma, cols) ||
      bad_ptr(dgamma, cols) || bad_ptr(rstd, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* pdy = static_cast<const float*>(dy);
  const auto* px = static_cast<const float*>(x);
  const auto* pg = static_cast<const float*>(gamma);
  auto* pdx = static_cast<float*>(dx);
  auto* pdg = static_cast<float*>(dgamma);
  // dgamma first: dx may overwrite dy in place.
  dscpp::parallel_for(cols, row_grain(rows), [&](int64_t c0, int64_t c1) {
    rms_bwd_gamma_k(pdy, px, rstd, pdg, rows, cols, c0, c1);
  }, kLineFloats);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    rms_bwd_dx_k(pdy + r0 * cols, px + r0 * cols, pg, rstd + r0, pdx + r0 * cols, r1 - r0, cols);
  });
  return DSCPP_OK;
}

int rope_forward(const dscpp_ops* o, void* x, int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim,
                 const int32_t* positions, int64_t pos0, const dscpp_rope* r) {
  return rope(o, x, batch, T, width, heads, head_dim, positions, pos0, r, false);
}

int rope_backward(const dscpp_ops* o, void* dx, int64_t batch, int64_t T, int64_t width, int64_t heads,
                  int64_t head_dim, const int32_t* positions, int64_t pos0, const dscpp_rope* r) {
  return rope(o, dx, batch, T, width, heads, head_dim, positions, pos0, r, true);
}

}  // namespace op

}  // namespace dscpp::kernels::cpu
