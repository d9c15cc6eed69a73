// The fused causal attention entries of the CPU ops table (model.h, ABI 2): argument checks and
// the split over (sequence, head) pairs. With the AVX-512 GEMM backend each pair runs the fused
// kernel of attention_avx512.cpp on one thread of the pool; with OpenBLAS the pairs run one
// after another as full GEMMs (gemm_f32, threaded by OpenBLAS) and the row softmaxes, the
// composition the gpt example used before this op existed.
//
// CUDA: causal_attention_forward/backward will be filled by a fused kernel per (sequence,
// head, query block) in kernels/cuda (scores in shared memory, llm.c's attention kernels as the
// model); until then the CUDA table leaves these entries NULL and a plugin falls back or fails.
#include "core/thread_pool.h"
#include "kernels/cpu/ops/attention_native.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/cpu/ops/gemm_native.h"

#include <algorithm>

namespace dscpp::kernels::cpu {
namespace {

struct Shape {
  int64_t batch, T, heads, D;
  int64_t C() const { return heads * D; }
};

int check_shape(const Shape& s, float scale) {
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
  return AttentionPair{q, q + C, q + 2 * C, 3 * C, s.T, s.D, scale};
}
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

void forward_composed(const AttentionPair& a, float* probs, float* out, int64_t ld_out) {
  const int64_t T = a.T;
  gemm_f32(product(false, true, T, T, a.D, a.scale, a.q, a.ld, a.k, a.ld, probs, T));
  for (int64_t t = 0; t < T; ++t) {
    softmax_row(probs + t * T, 1.0f, probs + t * T, t + 1);
    std::fill(probs + t * T + t + 1, probs + (t + 1) * T, 0.0f);
  }
  gemm_f32(product(false, false, T, a.D, T, 1.0f, probs, T, a.v, a.ld, out, ld_out));
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

int causal_attention_forward(const dscpp_ops* o, const void* qkv, void* probs, void* out, int64_t batch, int64_t T,
                             int64_t heads, int64_t head_dim, float scale) {
  if (int st = check_table(o)) return st;
  const Shape s{batch, T, heads, head_dim};
  if (int st = check_shape(s, scale)) return st;
  const int64_t n = batch * T * s.C();
  if (bad_ptr(qkv, 3 * n) || bad_ptr(out, n) || bad_ptr(probs, batch * heads * T * T)) return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* x = static_cast<const float*>(qkv);
  auto* pr = static_cast<float*>(probs);
  auto* y = static_cast<float*>(out);
  const bool fused = gemm_backend() == GemmBackend::avx512;
  for_pairs(batch * heads, [&](int64_t p, int64_t after) {
    const AttentionPair a = pair_of(x, s, p, scale);
    float* pp = pr + p * T * T;
    float* op = y + out_offset(s, p);
    AttentionNext next;
    if (after >= 0) {
      const AttentionPair n = pair_of(x, s, after, scale);
      for (const float* m : {n.q, n.k, n.v}) next.add(m, n.ld, n.D);
    }
    if (fused) attention_forward_avx512(a, pp, op, s.C(), next);
    else forward_composed(a, pp, op, s.C());
  });
  return DSCPP_OK;
}

int causal_attention_backward(const dscpp_ops* o, const void* qkv, const void* probs, const void* dout, void* dqkv,
                              void* workspace, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                              float scale) {
  if (int st = check_table(o)) return st;
  const Shape s{batch, T, heads, head_dim};
  if (int st = check_shape(s, scale)) return st;
  const int64_t n = batch * T * s.C(), nprobs = batch * heads * T * T;
  if (bad_ptr(qkv, 3 * n) || bad_ptr(dqkv, 3 * n) || bad_ptr(dout, n) || bad_ptr(probs, nprobs) ||
      bad_ptr(workspace, nprobs))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  const auto* x = static_cast<const float*>(qkv);
  const auto* pr = static_cast<const float*>(probs);
  const auto* dy = static_cast<const float*>(dout);
  auto* dx = static_cast<float*>(dqkv);
  auto* ws = static_cast<float*>(workspace);
  const bool fused = gemm_backend() == GemmBackend::avx512;
  for_pairs(batch * heads, [&](int64_t p, int64_t after) {
    const AttentionPair a = pair_of(x, s, p, scale);
    // The gradient of pair p sits where its q/k/v sit in qkv.
    float* dq = dx + (a.q - x);
    const float* pp = pr + p * T * T;
    const float* dop = dy + out_offset(s, p);
    AttentionNext next;
    if (after >= 0) {
      const AttentionPair n = pair_of(x, s, after, scale);
      for (const float* m : {n.q, n.k, n.v}) next.add(m, n.ld, n.D);
      next.add(dy + out_offset(s, after), s.C(), s.D);
      next.add(pr + after * T * T, T, T);
    }
    if (fused)
      attention_backward_avx512(a, pp, dop, s.C(), dq, dq + s.C(), dq + 2 * s.C(), ws + p * T * T, next);
    else backward_composed(a, pp, dop, s.C(), dq, dq + s.C(), dq + 2 * s.C(), ws + p * T * T);
  });
  return DSCPP_OK;
}

}  // namespace

void fill_attention_ops(dscpp_ops& t) {
  t.causal_attention_forward = causal_attention_forward;
  t.causal_attention_backward = causal_attention_backward;
}

}  // namespace dscpp::kernels::cpu
