// The row kernels of the table's blockwise causal attention (ops_layers.cpp's flash entries
// without cuDNN): the table computes the scores of one block of queries against the keys they
// see with a cuBLAS GEMM, these kernels turn them into probabilities (forward) or into the
// score gradient (backward), and GEMMs finish the block. So the T² scores of a whole sequence
// never exist at once, and the work runs on cuBLAS's GEMMs instead of a hand-written loop: on an
// H200 the earlier one-thread-per-query kernels spent 87% of an fp32 step (ncu).
//
// q, k, v, out and their gradients are copied to head-major [batch·heads][T][head_dim] first (in
// fp32, whatever the compute dtype: the copies are where 16-bit tensors are widened), so
// one strided-batched GEMM covers every (sequence, head) pair of a block of queries: with the
// heads of one sequence per GEMM (the first version) the products were too small for cuBLAS's
// large tiles. A block's score matrix is [pairs][rows][keys] (queries q0 … q0+rows−1, keys
// 0 … keys−1); query q sees keys 0 … q, or first_key[q] … q (the masked entries).
#include "kernels/cuda/ops_kernels.h"
#include "kernels/cuda/softmax_row.h"
#include "kernels/ops_math.h"


namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {


// Where row r (= h·rows + i) of a block's scores keeps its log-sum-exp: lse is batch × heads × T.
// The row's query sees keys first(r) … live(r) − 1.
struct BlockRows {
  int64_t rows, keys, q0, T, lse_base;  // lse_base = b·heads·T
  const int32_t* first_key;             // null: causal; else query t of sequence s at s·first_ld + t
  int64_t first_ld, seq_heads;          // row block h belongs to sequence h / seq_heads
  DSCPP_HD int64_t live(int64_t r) const {
    const int64_t seen = q0 + divmod(r, rows).rem + 1;
    return seen < keys ? seen : keys;
  }
  DSCPP_HD int64_t first(int64_t r) const {
    if (first_key == nullptr) return 0;
    const QuotRem qr = divmod(r, rows);
    const int64_t t = q0 + qr.rem, f = first_key[qr.quot / seq_heads * first_ld + t];
    return f < 0 ? 0 : f > t ? t : f;
  }
  DSCPP_HD int64_t lse_index(int64_t r) const {
    const QuotRem qr = divmod(r, rows);
    return lse_base + qr.quot * T + q0 + qr.rem;
  }
};

// One warp (or block) per score row. Rounds: max of scale·s, then Σ e^(scale·s − max); finish writes the
// probabilities (0 beyond the live keys) over the scores and the row's log-sum-exp.
struct BlockSoftmax {
  static constexpr int kRounds = 2;
  float* s;
  float* lse;
  BlockRows b;
  float scale;
  DSCPP_HD double partial(const Thread& t, int round, const double* totals) const {
    return softmax_partial(s + int64_t(t.block) * b.keys, b.first(t.block), b.live(t.block), scale, t, round, totals);
  }
  DSCPP_HD static double combine(int r, double p, double q) { return softmax_combine(r, p, q); }
  DSCPP_HD void finish(const Thread& t, const double* totals) const {
    float* row = s + int64_t(t.block) * b.keys;
    softmax_write(row, row, b.keys, b.first(t.block), b.live(t.block), scale, totals, t);
    if (t.thread == 0)
      lse[b.lse_index(t.block)] = static_cast<float>(totals[0]) + hd::log_f(static_cast<float>(totals[1]));
  }
};

// Per element of a block: p = e^(scale·s − lse) over the scores, ds = scale·p·(dp − delta) over
// dp (0 beyond the live keys).
struct BlockGrad {
  float *s, *dp;
  const float *lse, *delta;
  BlockRows b;
  float scale;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem rc = divmod(i, b.keys);
    const int64_t r = rc.quot, c = rc.rem;
    if (c >= b.live(r) || c < b.first(r)) {
      s[i] = 0.0f, dp[i] = 0.0f;
      return;
    }
    const int64_t q = b.lse_index(r);
    const float p = hd::exp_f(scale * s[i] - lse[q]);
    s[i] = p;
    dp[i] = scale * p * (dp[i] - delta[q]);
  }
};

// delta[(b·heads + h)·T + t] = Σ_d dout·out over head h's columns of row (b, t).
struct Delta {
  Src out, dout;
  float* delta;
  int64_t T, heads, D;
  DSCPP_HD void operator()(int64_t i) const {
    const QuotRem bh_t = divmod(i, T), b_h = divmod(bh_t.quot, heads);
    const int64_t off = (b_h.quot * T + bh_t.rem) * heads * D + b_h.rem * D;
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d) acc += dout[off + d] * out[off + d];
    delta[i] = acc;
  }
};

// Index i of a head-major [batch·heads][T][D] tensor ↔ column offset + h·D + d of row (b, t) of
// a width-wide row-major tensor (qkv: width 3C, offset 0, C or 2C; out: width C).
struct HeadLayout {
  int64_t T, heads, D, width, offset;
  DSCPP_HD int64_t row_index(int64_t i) const {
    const QuotRem r_d = divmod(i, D), r_t = divmod(r_d.quot, T), b_h = divmod(r_t.quot, heads);
    return (b_h.quot * T + r_t.rem) * width + offset + b_h.rem * D + r_d.rem;
  }
};
struct ToHeads {
  Src src;
  float* dst;
  HeadLayout l;
  DSCPP_HD void operator()(int64_t i) const { dst[i] = src[l.row_index(i)]; }
};
struct FromHeads {
  const float* src;
  Dst dst;
  HeadLayout l;
  DSCPP_HD void operator()(int64_t i) const { dst[l.row_index(i)] = src[i]; }
};

BlockRows block_rows(const AttentionBlock& blk) {
  return {blk.rows, blk.keys, blk.q0, blk.T, blk.b * blk.heads * blk.T, blk.first_key, blk.first_ld, blk.seq_heads};
}

}  // namespace

Status attention_block_softmax(float* scores, float* lse, const AttentionBlock& blk, float scale, Stream s) {
  const int64_t rows = blk.heads * blk.rows;
  if (rows == 0 || blk.keys == 0) return kOk;
  return launch_rows(unsigned(rows), blk.keys, s, BlockSoftmax{scores, lse, block_rows(blk), scale});
}

Status attention_block_grad(float* scores, float* dp, const float* lse, const float* delta, const AttentionBlock& blk,
                            float scale, Stream s) {
  return launch_elementwise(blk.heads * blk.rows * blk.keys, s,
                            BlockGrad{scores, dp, lse, delta, block_rows(blk), scale});
}

Status attention_delta(Src out, Src dout, float* delta, int64_t batch, int64_t T, int64_t heads,
                       int64_t head_dim, Stream s) {
  return launch_per_index(batch * heads * T, s, Delta{out, dout, delta, T, heads, head_dim});
}

Status attention_to_heads(Src src, int64_t width, int64_t offset, float* dst, int64_t batch, int64_t T,
                          int64_t heads, int64_t head_dim, Stream s) {
  return launch_elementwise(batch * heads * T * head_dim, s, ToHeads{src, dst, {T, heads, head_dim, width, offset}});
}

Status attention_from_heads(const float* src, Dst dst, int64_t width, int64_t offset, int64_t batch, int64_t T,
                            int64_t heads, int64_t head_dim, Stream s) {
  return launch_elementwise(batch * heads * T * head_dim, s, FromHeads{src, dst, {T, heads, head_dim, width, offset}});
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
