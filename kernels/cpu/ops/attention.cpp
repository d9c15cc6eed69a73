// The fused causal attention entries of the CPU ops table (model.h): argument checks and the
// split over (sequence, head) pairs. With the AVX-512 GEMM backend each pair runs the fused
// kernel of attention_avx512.cpp on one thread of the pool; with OpenBLAS the pairs run one
// after another as full GEMMs (gemm_f32, threaded by OpenBLAS) and the row softmaxes, the
// composition the gpt example used before this op existed.
//
// Two contracts: causal_attention_* (ABI 2) keeps the batch·heads·T² probabilities from forward
// to backward; flash_attention_* (ABI 3) keeps only each query's log-sum-exp, and here its
// backward makes a pair's probabilities again in a per-thread T² buffer (the same code as
// forward, so the same bits) before the shared backward. One pair's T² at a time instead of
// all of them: the CPU twin of the GPU's kernels that never hold a T² matrix at all.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/attention_native.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/cpu/ops/gemm_native.h"

#include <algorithm>
#include <vector>

namespace dscpp::kernels::cpu {
namespace {

struct Shape {
  int64_t batch, T, heads, D;
  const int32_t* first = nullptr;  // masked entries: each query's first key, sequence b at b·first_ld
  int64_t first_ld = 0;
  int64_t C() const { return heads * D; }
};

// The checks every attention entry starts with: the table, then the shape.
int check_shape(const dscpp_ops* o, const Shape& s, float scale) {
  if (int st = check_table(o)) return st;
  // Row strides (3·heads·head_dim, T) must fit the kernels' 32-bit strides.
  if (s.batch < 0 || !fits_int32(s.T) || !fits_int32(s.heads) || !fits_int32(s.D) || s.heads * s.D > INT32_MAX / 3 ||
      !(scale == scale))
    return DSCPP_E_INVALID_ARGUMENT;
  return DSCPP_OK;
}

// Pair p = b·heads + h: its q/k/v, out and probs.
AttentionPair pair_of(const float* qkv, const Shape& s, int64_t p, float scale) {
  const int64_t b = p / s.heads, h = p % s.heads, C = s.C();
  const float* q = qkv + b * s.T * 3 * C + h * s.D;
  return AttentionPair{q, q + C, q + 2 * C, 3 * C, s.T, s.D, scale, s.first ? s.first + b * s.first_ld : nullptr};
}

}  // namespace

float probability_row(const AttentionPair& a, float* row, int64_t t) {
  int64_t first = a.first != nullptr ? a.first[t] : 0;
  first = std::clamp<int64_t>(first, 0, t);
  std::fill(row, row + first, 0.0f);
  std::fill(row + t + 1, row + a.T, 0.0f);
  return softmax_row(row + first, 1.0f, row + first, t + 1 - first);
}

namespace {

int64_t out_offset(const Shape& s, int64_t p) { return (p / s.heads) * s.T * s.C() + (p % s.heads) * s.D; }

GemmArgs product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  return g;
}

// As attention_forward_avx512: out and lse may be null.
void forward_composed(const AttentionPair& a, float* probs, float* out, int64_t ld_out, float* lse) {
  const int64_t T = a.T;
  gemm_f32(product(false, true, T, T, a.D, a.scale, a.q, a.ld, a.k, a.ld, probs, T));
  for (int64_t t = 0; t < T; ++t) {
    const float l = probability_row(a, probs + t * T, t);
    if (lse != nullptr) lse[t] = l;
  }
  if (out != nullptr) gemm_f32(product(false, false, T, a.D, T, 1.0f, probs, T, a.v, a.ld, out, ld_out));
}

void backward_composed(const AttentionPair& a, const float* probs, const float* dout, int64_t ld_out, float* dq,
                       float* dk, float* dv, float* ds) {
  const int64_t T = a.T, D = a.D;
  gemm_f32(product(false, true, T, T, D, 1.0f, dout, ld_out, a.v, a.ld, ds, T));  // dP
  for (int64_t t = 0; t < T; ++t) {
    softmax_row_backward(probs + t * T, ds + t * T, a.scale, ds + t * T, t + 1);
    std::fill(ds + t * T + t + 1, ds + (t + 1) * T, 0.0f);
  }
  gemm_f32(product(false, false, T, D, T, 1.0f, ds, T, a.k, a.ld, dq, a.ld));
  gemm_f32(product(true, false, T, D, T, 1.0f, ds, T, a.q, a.ld, dk, a.ld));
  gemm_f32(product(true, false, T, D, T, 1.0f, probs, T, dout, ld_out, dv, a.ld));
}

// Runs fn(p, next) for every pair, next being the pair the same thread runs after p (or -1):
// spread over the pool with the AVX-512 kernels (contiguous ranges of pairs per thread), in
// order on this thread with OpenBLAS (whose GEMMs thread themselves).
template <class Fn>
void for_pairs(int64_t pairs, Fn&& fn) {
  if (gemm_backend() == GemmBackend::avx512)
    dscpp::parallel_for(pairs, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) fn(p, p + 1 < p1 ? p + 1 : -1);
    });
  else
    for (int64_t p = 0; p < pairs; ++p) fn(p, -1);
}

// Pair p's forward: probs (T × T), out (null: none) and lse (null: none).
void pair_forward(const float* x, const Shape& s, float scale, int64_t p, int64_t after, float* probs, float* out,
                  float* lse) {
  const AttentionPair a = pair_of(x, s, p, scale);
  AttentionNext next;
  if (after >= 0) {
    const AttentionPair n = pair_of(x, s, after, scale);
    for (const float* m : {n.q, n.k, n.v}) next.add(m, n.ld, n.D);
  }
  if (gemm_backend() == GemmBackend::avx512) attention_forward_avx512(a, probs, out, s.C(), lse, next);
  else forward_composed(a, probs, out, s.C(), lse);
}

// Pair p's backward from its probs; dscores: T × T scratch. `next_probs` is the next pair's
// (null when this thread makes them itself).
void pair_backward(const float* x, const float* dy, float* dx, const Shape& s, float scale, int64_t p, int64_t after,
                   const float* probs, const float* next_probs, float* dscores) {
  const AttentionPair a = pair_of(x, s, p, scale);
  float* dq = dx + (a.q - x);  // the gradient of pair p sits where its q/k/v sit in qkv
  const float* dop = dy + out_offset(s, p);
  AttentionNext next;
  if (after >= 0) {
    const AttentionPair n = pair_of(x, s, after, scale);
    for (const float* m : {n.q, n.k, n.v}) next.add(m, n.ld, n.D);
    next.add(dy + out_offset(s, after), s.C(), s.D);
    if (next_probs != nullptr) next.add(next_probs, s.T, s.T);
  }
  if (gemm_backend() == GemmBackend::avx512)
    attention_backward_avx512(a, probs, dop, s.C(), dq, dq + s.C(), dq + 2 * s.C(), dscores, next);
  else backward_composed(a, probs, dop, s.C(), dq, dq + s.C(), dq + 2 * s.C(), dscores);
}

// A thread's T² buffers for the flash entries (grown, never shrunk: one pair's worth).
float* thread_buffer(int which, int64_t n) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[which];
  if (int64_t(b.size()) < n) b.resize(size_t(n));
  return b.data();
}

}  // namespace

namespace op {

int causal_attention_forward(const dscpp_ops* o, const void* qkv, void* probs, void* out, int64_t batch, int64_t T,
                             int64_t heads, int64_t head_dim, float scale) {
  const Shape s{batch, T, heads, head_dim};
  if (int st = check_shape(o, s, scale)) return st;
  const int64_t n = batch * T * s.C();
  if (bad_ptr(qkv, 3 * n) || bad_ptr(out, n) || bad_ptr(probs, batch * heads * T * T)) return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* x = static_cast<const float*>(qkv);
  auto* pr = static_cast<float*>(probs);
  auto* y = static_cast<float*>(out);
  for_pairs(batch * heads, [&](int64_t p, int64_t after) {
    pair_forward(x, s, scale, p, after, pr + p * T * T, y + out_offset(s, p), nullptr);
  });
  return DSCPP_OK;
}

int causal_attention_backward(const dscpp_ops* o, const void* qkv, const void* probs, const void* dout, void* dqkv,
                              void* workspace, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                              float scale) {
  const Shape s{batch, T, heads, head_dim};
  if (int st = check_shape(o, s, scale)) return st;
  const int64_t n = batch * T * s.C(), nprobs = batch * heads * T * T;
  if (bad_ptr(qkv, 3 * n) || bad_ptr(dqkv, 3 * n) || bad_ptr(dout, n) || bad_ptr(probs, nprobs) ||
      bad_ptr(workspace, nprobs))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* x = static_cast<const float*>(qkv);
  const auto* pr = static_cast<const float*>(probs);
  auto* ws = static_cast<float*>(workspace);
  for_pairs(batch * heads, [&](int64_t p, int64_t after) {
    pair_backward(x, static_cast<const float*>(dout), static_cast<float*>(dqkv), s, scale, p, after, pr + p * T * T,
                  after >= 0 ? pr + after * T * T : nullptr, ws + p * T * T);
  });
  return DSCPP_OK;
}

}  // namespace op

namespace {

// The flash entries, causal (s.first null) or masked.
int flash_forward(const dscpp_ops* o, const Shape& s, const void* qkv, float* lse, void* out, float scale) {
  if (int st = check_shape(o, s, scale)) return st;
  const int64_t n = s.batch * s.T * s.C();
  if (bad_ptr(qkv, 3 * n) || bad_ptr(out, n) || bad_ptr(lse, s.batch * s.heads * s.T)) return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* x = static_cast<const float*>(qkv);
  auto* y = static_cast<float*>(out);
  for_pairs(s.batch * s.heads, [&](int64_t p, int64_t after) {
    pair_forward(x, s, scale, p, after, thread_buffer(0, s.T * s.T), y + out_offset(s, p), lse + p * s.T);
  });
  return DSCPP_OK;
}

// out, lse and the workspace are the GPU's inputs (FlashAttention's backward needs Σ dout·out
// per query and the log-sum-exp); this backward makes the probabilities again from q and k.
int flash_backward(const dscpp_ops* o, const Shape& s, const void* qkv, const void* out, const float* lse,
                   const void* dout, void* dqkv, float* workspace, float scale) {
  if (int st = check_shape(o, s, scale)) return st;
  const int64_t n = s.batch * s.T * s.C(), rows = s.batch * s.heads * s.T;
  if (bad_ptr(qkv, 3 * n) || bad_ptr(dqkv, 3 * n) || bad_ptr(dout, n) || bad_ptr(out, n) || bad_ptr(lse, rows) ||
      bad_ptr(workspace, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* x = static_cast<const float*>(qkv);
  for_pairs(s.batch * s.heads, [&](int64_t p, int64_t after) {
    float* probs = thread_buffer(0, s.T * s.T);
    pair_forward(x, s, scale, p, -1, probs, nullptr, nullptr);
    pair_backward(x, static_cast<const float*>(dout), static_cast<float*>(dqkv), s, scale, p, after, probs, nullptr,
                  thread_buffer(1, s.T * s.T));
  });
  return DSCPP_OK;
}

// A masked entry's shape: first_key must cover every sequence's T queries.
bool masked_shape(Shape& s, const int32_t* first_key, int64_t ld) {
  s.first = first_key;
  s.first_ld = ld;
  return ld >= 0 && (s.batch <= 1 || ld >= s.T);
}

}  // namespace

namespace op {

int flash_attention_forward(const dscpp_ops* o, const void* qkv, float* lse, void* out, int64_t batch, int64_t T,
                            int64_t heads, int64_t head_dim, float scale) {
  return flash_forward(o, Shape{batch, T, heads, head_dim}, qkv, lse, out, scale);
}

int flash_attention_backward(const dscpp_ops* o, const void* qkv, const void* out, const float* lse, const void* dout,
                             void* dqkv, float* workspace, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                             float scale) {
  return flash_backward(o, Shape{batch, T, heads, head_dim}, qkv, out, lse, dout, dqkv, workspace, scale);
}

int flash_attention_masked_forward(const dscpp_ops* o, const void* qkv, const int32_t* first_key, int64_t first_key_ld,
                                   float* lse, void* out, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                                   float scale) {
  Shape s{batch, T, heads, head_dim};
  if (first_key != nullptr && !masked_shape(s, first_key, first_key_ld)) return DSCPP_E_INVALID_ARGUMENT;
  return flash_forward(o, s, qkv, lse, out, scale);
}

int flash_attention_masked_backward(const dscpp_ops* o, const void* qkv, const int32_t* first_key,
                                    int64_t first_key_ld, const void* out, const float* lse, const void* dout,
                                    void* dqkv, float* workspace, int64_t batch, int64_t T, int64_t heads,
                                    int64_t head_dim, float scale) {
  Shape s{batch, T, heads, head_dim};
  if (first_key != nullptr && !masked_shape(s, first_key, first_key_ld)) return DSCPP_E_INVALID_ARGUMENT;
  return flash_backward(o, s, qkv, out, lse, dout, dqkv, workspace, scale);
}

}  // namespace op

}  // namespace dscpp::kernels::cpu
