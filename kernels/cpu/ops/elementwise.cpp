// Elementwise ops, bias, activations (GELU, ReLU, SiLU, SwiGLU), strided copies and dropout of the CPU
// ops table. Each kernel is a DSCPP_SIMD function over one contiguous chunk; parallel_for hands
// chunks of at least kGrainElements to the pool's threads, aligned to 16 floats so no two
// threads write one cache line.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"

#include <algorithm>
#include <cstring>

namespace dscpp::kernels::cpu {
namespace {


DSCPP_SIMD void fill_k(float* x, float v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = v;
}

DSCPP_SIMD void add_k(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

DSCPP_SIMD void axpy_k(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

DSCPP_SIMD void scale_k(float alpha, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

DSCPP_SIMD void bias_add_k(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

// Column sums of dy over all rows for columns [c0, c1), added to dbias. Summed in a local tile
// first so the existing gradient is added once, and in row order, so the result does not
// depend on the thread count.
DSCPP_SIMD void bias_grad_k(const float* dy, float* dbias, int64_t rows, int64_t cols, int64_t c0, int64_t c1) {
  constexpr int64_t kTile = 256;
  float acc[kTile];
  for (int64_t t0 = c0; t0 < c1; t0 += kTile) {
    const int64_t w = std::min(kTile, c1 - t0);
    for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols + t0;
      for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < w; ++j) dbias[t0 + j] += acc[j];
  }
}

// GELU and its derivative are the shared element functions of kernels/ops_math.h; inlined,
// these loops vectorise as before.
DSCPP_SIMD void gelu_fwd_k(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = hd::gelu(x[i]);
}

DSCPP_SIMD void gelu_bwd_k(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * hd::gelu_grad(x[i]);
}

DSCPP_SIMD void relu_fwd_k(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

DSCPP_SIMD void relu_bwd_k(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

DSCPP_SIMD void mul_k(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

DSCPP_SIMD void silu_fwd_k(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = hd::silu(x[i]);
}

DSCPP_SIMD void silu_bwd_k(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * hd::silu_grad(x[i]);
}

DSCPP_SIMD void swiglu_fwd_k(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = hd::silu(gate[i]) * up[i];
}

// dgate and dup may be gate and up: both inputs of an element are read before either is written.
DSCPP_SIMD void swiglu_bwd_k(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dy[i];
    dgate[i] = d * u * hd::silu_grad(g);
    dup[i] = d * hd::silu(g);
  }
}

// Elements first … first + n − 1 of the call's mask: the index is the element's in the whole
// tensor, so the mask does not depend on how the pool splits it. The hash is 64-bit integer work
// (two multiplies an element); the x86-64-v4 clone does it in AVX-512 lanes (vpmullq).
DSCPP_SIMD void dropout_k(const float* x, float* y, int64_t n, int64_t first, hd::DropoutDraw d) {
  for (int64_t i = 0; i < n; ++i) y[i] = hd::dropout(x[i], d, first + i);
}

DSCPP_SIMD void add_into_k(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// Runs f(begin, end) over [0, n) on the pool, in cache-line-aligned chunks.
template <class F>
void chunked(int64_t n, int64_t grain, F&& f) {
  dscpp::parallel_for(n, grain, [&](int64_t b, int64_t e) { f(b, e); }, kLineFloats);
}

int check_matrix(int64_t rows, int64_t cols) { return rows < 0 || cols < 0 ? DSCPP_E_INVALID_ARGUMENT : DSCPP_OK; }

// Unary ops: validate, then run kernel(x + b, ..., e − b) over chunks.
template <class K>
int unary(const dscpp_ops* o, const void* x, void* y, int64_t n, int64_t grain, K kernel) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(x);
  auto* py = static_cast<float*>(y);
  chunked(n, grain, [&](int64_t b, int64_t e) { kernel(px + b, py + b, e - b); });
  return DSCPP_OK;
}

template <class K>
int binary(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n, int64_t grain, K kernel) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(dy, n) || bad_ptr(dx, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(x);
  const auto* pdy = static_cast<const float*>(dy);
  auto* pdx = static_cast<float*>(dx);
  chunked(n, grain, [&](int64_t b, int64_t e) { kernel(px + b, pdy + b, pdx + b, e - b); });
  return DSCPP_OK;
}

// GELU costs ~30 flops per element, so its chunks can be smaller than a streaming loop's.
constexpr int64_t kGeluGrain = kGrainElements / 4;

}  // namespace

namespace op {

int fill(const dscpp_ops* o, void* x, float v, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n)) return DSCPP_E_INVALID_ARGUMENT;
  auto* p = static_cast<float*>(x);
  chunked(n, kGrainElements, [&](int64_t b, int64_t e) { fill_k(p + b, v, e - b); });
  return DSCPP_OK;
}

// x and y are either the same buffer or disjoint (partial overlap is not supported).
int copy(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0 || x == y) return DSCPP_OK;
  const auto* src = static_cast<const float*>(x);
  auto* dst = static_cast<float*>(y);
  chunked(n, 4 * kGrainElements,
          [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(float)); });
  return DSCPP_OK;
}

int add(const dscpp_ops* o, const void* a, const void* b, void* y, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(a, n) || bad_ptr(b, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* pa = static_cast<const float*>(a);
  const auto* pb = static_cast<const float*>(b);
  auto* py = static_cast<float*>(y);
  chunked(n, kGrainElements, [&](int64_t s, int64_t e) { add_k(pa + s, pb + s, py + s, e - s); });
  return DSCPP_OK;
}

int axpy(const dscpp_ops* o, float alpha, const void* x, void* y, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* px = static_cast<const float*>(x);
  auto* py = static_cast<float*>(y);
  chunked(n, kGrainElements, [&](int64_t b, int64_t e) { axpy_k(alpha, px + b, py + b, e - b); });
  return DSCPP_OK;
}

int scale(const dscpp_ops* o, float alpha, void* x, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n)) return DSCPP_E_INVALID_ARGUMENT;
  auto* p = static_cast<float*>(x);
  chunked(n, kGrainElements, [&](int64_t b, int64_t e) { scale_k(alpha, p + b, e - b); });
  return DSCPP_OK;
}

int bias_add(const dscpp_ops* o, void* x, const void* bias, int64_t rows, int64_t cols) {
  if (int s = check_table(o)) return s;
  if (check_matrix(rows, cols) || bad_ptr(x, rows * cols) || bad_ptr(bias, rows > 0 ? cols : 0))
    return DSCPP_E_INVALID_ARGUMENT;
  auto* px = static_cast<float*>(x);
  const auto* pb = static_cast<const float*>(bias);
  dscpp::parallel_for(rows, row_grain(cols),
                      [&](int64_t r0, int64_t r1) { bias_add_k(px + r0 * cols, pb, r1 - r0, cols); });
  return DSCPP_OK;
}

int bias_grad(const dscpp_ops* o, const void* dy, void* dbias, int64_t rows, int64_t cols) {
  if (int s = check_table(o)) return s;
  if (check_matrix(rows, cols) || bad_ptr(dy, rows * cols) || bad_ptr(dbias, cols)) return DSCPP_E_INVALID_ARGUMENT;
  if (rows == 0) return DSCPP_OK;
  const auto* pd = static_cast<const float*>(dy);
  auto* pb = static_cast<float*>(dbias);
  // Split by columns: every thread reads all rows but owns its slice of dbias.
  chunked(cols, row_grain(rows), [&](int64_t c0, int64_t c1) { bias_grad_k(pd, pb, rows, cols, c0, c1); });
  return DSCPP_OK;
}

int gelu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  return unary(o, x, y, n, kGeluGrain, gelu_fwd_k);
}

int gelu_backward(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n) {
  return binary(o, x, dy, dx, n, kGeluGrain, gelu_bwd_k);
}

int relu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  return unary(o, x, y, n, kGrainElements, relu_fwd_k);
}

int relu_backward(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n) {
  return binary(o, x, dy, dx, n, kGrainElements, relu_bwd_k);
}

int mul(const dscpp_ops* o, const void* a, const void* b, void* y, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(a, n) || bad_ptr(b, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* pa = static_cast<const float*>(a);
  const auto* pb = static_cast<const float*>(b);
  auto* py = static_cast<float*>(y);
  chunked(n, kGrainElements, [&](int64_t s, int64_t e) { mul_k(pa + s, pb + s, py + s, e - s); });
  return DSCPP_OK;
}

int silu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
  return unary(o, x, y, n, kGeluGrain, silu_fwd_k);
}

int silu_backward(const dscpp_ops* o, const void* x, const void* dy, void* dx, int64_t n) {
  return binary(o, x, dy, dx, n, kGeluGrain, silu_bwd_k);
}

int swiglu_forward(const dscpp_ops* o, const void* gate, const void* up, void* y, int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(gate, n) || bad_ptr(up, n) || bad_ptr(y, n)) return DSCPP_E_INVALID_ARGUMENT;
  const auto* g = static_cast<const float*>(gate);
  const auto* u = static_cast<const float*>(up);
  auto* py = static_cast<float*>(y);
  chunked(n, kGeluGrain, [&](int64_t b, int64_t e) { swiglu_fwd_k(g + b, u + b, py + b, e - b); });
  return DSCPP_OK;
}

int swiglu_backward(const dscpp_ops* o, const void* gate, const void* up, const void* dy, void* dgate, void* dup,
                    int64_t n) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(gate, n) || bad_ptr(up, n) || bad_ptr(dy, n) || bad_ptr(dgate, n) || bad_ptr(dup, n) ||
      (n > 0 && (dy == dgate || dy == dup || dgate == dup)))
    return DSCPP_E_INVALID_ARGUMENT;
  const auto* g = static_cast<const float*>(gate);
  const auto* u = static_cast<const float*>(up);
  const auto* d = static_cast<const float*>(dy);
  auto* dg = static_cast<float*>(dgate);
  auto* du = static_cast<float*>(dup);
  chunked(n, kGeluGrain, [&](int64_t b, int64_t e) { swiglu_bwd_k(g + b, u + b, d + b, dg + b, du + b, e - b); });
  return DSCPP_OK;
}

int copy_2d(const dscpp_ops* o, const void* src, int64_t src_ld, void* dst, int64_t dst_ld, int64_t rows, int64_t cols,
            int32_t accumulate) {
  if (int s = check_table(o)) return s;
  if (rows < 0 || cols < 0 || src_ld < cols || dst_ld < cols || (accumulate != 0 && accumulate != 1))
    return DSCPP_E_INVALID_ARGUMENT;
  if (rows == 0 || cols == 0) return DSCPP_OK;
  if (src == nullptr || dst == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  const auto* ps = static_cast<const float*>(src);
  auto* pd = static_cast<float*>(dst);
  dscpp::parallel_for(rows, row_grain(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (accumulate) add_into_k(ps + r * src_ld, pd + r * dst_ld, cols);
      else std::memcpy(pd + r * dst_ld, ps + r * src_ld, static_cast<size_t>(cols) * sizeof(float));
    }
  });
  return DSCPP_OK;
}

int dropout(const dscpp_ops* o, const void* x, void* y, int64_t n, float p, uint64_t seed) {
  if (int s = check_table(o)) return s;
  if (n < 0 || bad_ptr(x, n) || bad_ptr(y, n) || !dropout_p_ok(p)) return DSCPP_E_INVALID_ARGUMENT;
  if (p == 0.0f) return copy(o, x, y, n);
  const hd::DropoutDraw d = hd::dropout_draw(p, seed);
  const auto* px = static_cast<const float*>(x);
  auto* py = static_cast<float*>(y);
  chunked(n, kGeluGrain, [&](int64_t b, int64_t e) { dropout_k(px + b, py + b, e - b, b, d); });
  return DSCPP_OK;
}

}  // namespace op

void gelu_rows(const float* x, float* y, int64_t n) { gelu_fwd_k(x, y, n); }
void gelu_backward_rows(const float* x, const float* dy, float* dx, int64_t n) { gelu_bwd_k(x, dy, dx, n); }

}  // namespace dscpp::kernels::cpu
