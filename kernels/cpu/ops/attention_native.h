// Fused causal attention of one (sequence, head) pair (private to kernels/cpu/ops); the op
// entries in attention.cpp run these for every pair. Matrices are row-major with the given
// row strides: q, k, v and their gradients T × D with stride ld (rows of the packed qkv), out and
// dout T × D with stride ld_out, probs and the dscores scratch T × T with stride T.
#pragma once

#include <cstdint>

namespace dscpp::kernels::cpu {

struct AttentionPair {
  const float* q;
  const float* k;
  const float* v;
  int64_t ld;
  int64_t T, D;  // tokens, head dimension
  float scale;
  const int32_t* first = nullptr;  // query t sees keys first[t] … t (null: 0 … t)
};

// Row t of the scores (T floats) into probabilities in place: the softmax over the keys query t
// sees, 0 for the others; returns its log-sum-exp. Backward needs no mask of its own: where a
// probability is 0 so is its score gradient.
float probability_row(const AttentionPair& a, float* row, int64_t t);

// T-row matrices of the pair a thread computes next (null when none): fetched into L2 while
// this pair computes, since every pair's q/k/v/dout rows arrive cold from L3 and packing them
// is latency-bound otherwise.
struct AttentionNext {
  static constexpr int kMax = 5;
  const float* base[kMax] = {};
  int64_t ld[kMax] = {}, width[kMax] = {};  // row stride and floats per row
  int count = 0;
  void add(const float* b, int64_t l, int64_t w) {
    base[count] = b;
    ld[count] = l;
    width[count] = w;
    ++count;
  }
};

// probs = causal softmax(scale·q·kᵀ) (0 above the diagonal and before a.first), out = probs·v (skipped when out
// is null: the backward of the op that keeps no probabilities makes them again this way, the
// same bits); lse[t] = log Σ_{s≤t} exp(scale·q_t·k_s) when lse is non-null.
void attention_forward_avx512(const AttentionPair& a, float* probs, float* out, int64_t ld_out, float* lse,
                              const AttentionNext& next);
// dq, dk, dv (stride a.ld) from probs and dout; dscores: T × T scratch.
void attention_backward_avx512(const AttentionPair& a, const float* probs, const float* dout, int64_t ld_out,
                               float* dq, float* dk, float* dv, float* dscores, const AttentionNext& next);

}  // namespace dscpp::kernels::cpu
