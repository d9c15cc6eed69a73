// Device kernels behind the CUDA ops table (ops_table.cu), one per non-GEMM op of `dscpp_ops`
// (include/dscpp/model.h), each element through the shared math of kernels/ops_math.h that the
// CPU table (kernels/cpu/ops) uses. Pointers are device memory: Src/Dst tensors in the table's
// compute dtype (elems.h), float* ones always fp32; every
// call is asynchronous on `stream` and returns the launch status. Argument validation (and the
// host-visible results of cross-entropy) are the table's job: these assume valid arguments.
//
// Reductions are deterministic (fixed trees, fixed chunk orders); nothing uses atomics, so two
// runs give the same bits.
#pragma once

#include "kernels/cuda/elems.h"
#include "kernels/cuda/launch.h"
#include "kernels/ops_math.h"
#include "kernels/rope_math.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dscpp::DSCPP_CUDA_NS::ops {

// ---- elementwise (ops_elementwise.cu) ----
Status fill(Dst x, float v, int64_t n, Stream s);
Status add(Src a, Src b, Dst y, int64_t n, Stream s);
Status axpy(float alpha, Src x, Dst y, int64_t n, Stream s);
Status scale(float alpha, Dst x, int64_t n, Stream s);
Status gelu_forward(Src x, Dst y, int64_t n, Stream s);
Status gelu_backward(Src x, Src dy, Dst dx, int64_t n, Stream s);  // dx = dy·gelu'(x)
Status relu_forward(Src x, Dst y, int64_t n, Stream s);
Status relu_backward(Src x, Src dy, Dst dx, int64_t n, Stream s);
Status mul(Src a, Src b, Dst y, int64_t n, Stream s);
Status silu_forward(Src x, Dst y, int64_t n, Stream s);
Status silu_backward(Src x, Src dy, Dst dx, int64_t n, Stream s);  // dx = dy·silu'(x)
Status swiglu_forward(Src gate, Src up, Dst y, int64_t n, Stream s);
// dgate = dy·up·silu'(gate), dup = dy·silu(gate); dgate may be gate and dup may be up.
Status swiglu_backward(Src gate, Src up, Src dy, Dst dgate, Dst dup, int64_t n, Stream s);
// dst[r·dst_ld + c] = (or +=) src[r·src_ld + c] for a rows × cols block.
Status copy_2d(Src src, int64_t src_ld, Dst dst, int64_t dst_ld, int64_t rows, int64_t cols, bool accumulate,
               Stream s);
// y[i] = x[i]·keep(i)·scale with the draw's counter-based mask (ops_math.h); y may be x.
Status dropout(Src x, Dst y, int64_t n, const hd::DropoutDraw& d, Stream s);
// *bad = 1 when a position is negative (never cleared here).
Status check_positions(const int32_t* positions, int64_t n, int32_t* bad, Stream s);
// The rotary embedding of model.h's rope_forward (backward: the opposite angle), in place.
Status rope(Dst x, int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim, const int32_t* positions,
            int64_t pos0, const hd::RopeTable& table, bool backward, Stream s);
// x[r,c] += bias[c] (+ residual[r,c] when non-null); then gelu_out = gelu(x) when non-null.
// The linear layer's epilogue; bias may be null too.
Status bias_residual_gelu(Dst x, Src bias, Src residual, Dst gelu_out, int64_t rows,
                          int64_t cols, Stream s);
// *bad = 1 when any id is outside [0, vocab) (never cleared here).
Status check_ids(const int32_t* ids, int64_t n, int64_t vocab, int32_t* bad, Stream s);
Status embedding_forward(const int32_t* ids, Src table, Dst out, int64_t n, int64_t dim, Stream s);
// *bad = 1 when a target is ≥ cols (never cleared here).
Status check_targets(const int32_t* targets, int64_t rows, int64_t cols, int32_t* bad, Stream s);
// dlogits = scale·(probs − onehot(target)) for targets ≥ 0, 0 for ignored rows; dlogits may be probs.
Status cross_entropy_backward(Src probs, const int32_t* targets, Dst dlogits, int64_t rows, int64_t cols,
                              float scale, Stream s);

// ---- column reductions (ops_columns.cu) ----
// Rows are summed in chunks of rows_per_chunk (one thread per chunk and column), then the chunk
// partials per column in a fixed tree (one block per column). ≥ 32 rows per chunk keep the second pass under 1/32 of
// the first's reads; ~2^18 first-pass threads fill any current GPU (132 SMs × 2048) twice over.
struct ColumnPlan {
  int64_t chunks, rows_per_chunk;
};
DSCPP_HD constexpr ColumnPlan column_plan(int64_t rows, int64_t cols) {
  constexpr int64_t kMinRows = 32, kThreadsWanted = int64_t(1) << 18;
  const int64_t by_threads = cols > 0 && kThreadsWanted / cols > 1 ? kThreadsWanted / cols : 1;
  const int64_t by_rows = ceil_div(rows, kMinRows) > 1 ? ceil_div(rows, kMinRows) : 1;
  const int64_t per = ceil_div(rows > 0 ? rows : 1, by_rows < by_threads ? by_rows : by_threads);
  return {ceil_div(rows > 0 ? rows : 1, per), per};
}
// Device scratch (floats) a reduction of `outputs` sums per column needs; 0 for one chunk.
int64_t column_scratch_floats(int64_t rows, int64_t cols, int outputs);
// dbias[c] += Σ_r dy[r,c]; scratch: column_scratch_floats(rows, cols, 1).
Status bias_grad(Src dy, Dst dbias, int64_t rows, int64_t cols, float* scratch, Stream s);
// dgamma[c] += Σ_r dy·x̂, dbeta[c] += Σ_r dy; scratch: column_scratch_floats(rows, cols, 2).
Status layernorm_param_grads(Src dy, Src x, const float* mean, const float* rstd, Dst dgamma, Dst dbeta, int64_t rows,
                             int64_t cols, float* scratch, Stream s);
// The embedding gradient's plan, made on the host from the ids (n < 2^31): the positions in
// order of id (stable), then each run of one id's start (count + 1 entries), then its id.
std::vector<int32_t> embedding_segments(const int32_t* ids, int64_t n);
// dtable[id,:] += Σ dout[i,:] over id's positions in order, from embedding_segments' result in
// device memory (`count` runs); the same bits as the CPU table's row-by-row adds.
Status embedding_backward(const int32_t* segments, int64_t n, int64_t count, Src dout, Dst dtable,
                          int64_t dim, Stream s);

// dgamma[c] += Σ_r dy·x·rstd (RMSNorm); scratch: column_scratch_floats(rows, cols, 1).
Status rmsnorm_param_grad(Src dy, Src x, const float* rstd, Dst dgamma, int64_t rows, int64_t cols, float* scratch,
                          Stream s);

// ---- blockwise causal attention (ops_attention.cu) ----
// One block of queries q0 … q0+rows−1 of sequence b against keys 0 … keys−1; its scores (and
// score gradients) are [heads][rows][keys] row-major; lse and delta are batch × heads × T.
// (b = 0 with heads = batch·heads covers every sequence at once.)
struct AttentionBlock {
  int64_t b, heads, T, q0, rows, keys;
  // Masked attention: query t of sequence s (= pair / seq_heads) sees keys first_key[s·first_ld + t] … t.
  const int32_t* first_key = nullptr;
  int64_t first_ld = 0, seq_heads = 1;
};
// Scores → probabilities in place (query q0+i sees keys ≤ q0+i, from its first key when masked;
// 0 elsewhere), and each row's log Σ e^(scale·s) into lse.
Status attention_block_softmax(float* scores, float* lse, const AttentionBlock& blk, float scale, Stream s);
// Recomputed scores → probabilities p = e^(scale·s − lse) in place, and dp (= dout·vᵀ) → the
// scaled score gradient scale·p·(dp − delta) in place.
Status attention_block_grad(float* scores, float* dp, const float* lse, const float* delta, const AttentionBlock& blk,
                            float scale, Stream s);
// Copies between a row-major batch × T × width tensor's columns offset … offset+heads·head_dim
// and a head-major [batch·heads][T][head_dim] one.
Status attention_to_heads(Src src, int64_t width, int64_t offset, float* dst, int64_t batch, int64_t T,
                          int64_t heads, int64_t head_dim, Stream s);
Status attention_from_heads(const float* src, Dst dst, int64_t width, int64_t offset, int64_t batch, int64_t T,
                            int64_t heads, int64_t head_dim, Stream s);
// delta per (sequence, head, query) = Σ dout·out over the head's columns (out, dout: batch × T × heads·head_dim).
Status attention_delta(Src out, Src dout, float* delta, int64_t batch, int64_t T, int64_t heads,
                       int64_t head_dim, Stream s);

// ---- tiled attention (ops_flash.cu) ----
// The flash entries (model.h) in FlashAttention-2's schedule: no scores outside shared memory.
// first_key null: causal; else query t of sequence b sees keys first_key[b·first_ld + t] … t.
struct FlashShape {
  int64_t batch, T, heads, head_dim;
  float scale;
  const int32_t* first_key = nullptr;
  int64_t first_ld = 0;
};
// Head widths up to 128 whose blocks' shared memory the device gives (else the blockwise path).
bool flash_tiles_fit(int64_t batch, int64_t T, int64_t heads, int64_t head_dim);
// The shared memory of the largest block at a head width.
size_t flash_tiles_shared_bytes(int64_t head_dim);
Status flash_tiles_forward(Src qkv, float* lse, Dst out, const FlashShape& f, Stream s);
// delta: batch·heads·T floats of scratch (it gets attention_delta's result).
Status flash_tiles_backward(Src qkv, Src out, const float* lse, Src dout, Dst dqkv, float* delta,
                            const FlashShape& f, Stream s);

// ---- T5's relative position bias (ops_relative_bias.cu) ----
struct RelativeBias {
  int64_t heads, Tq, Tk, q0;
  bool bidirectional;
  int32_t num_buckets, max_distance;
};
// out[h, t, s] = table[bucket(s − q0 − t), h] (table [num_buckets, heads]).
Status relative_bias_forward(Src table, Dst out, const RelativeBias& rb, Stream s);
// Device scratch (floats) relative_bias_backward needs: one sum per (head, diagonal) and the
// diagonals' buckets.
int64_t relative_bias_scratch_floats(const RelativeBias& rb);
// dtable[k, h] += Σ dout[h, t, s] over the (t, s) of bucket k: each diagonal s − t summed over t
// in order, then each (bucket, head) sums its diagonals in order. No atomics.
Status relative_bias_backward(Src dout, Dst dtable, const RelativeBias& rb, float* scratch, Stream s);

// ---- row ops, one block per row (ops_rows.cu) ----
Status layernorm_forward(Src x, Src gamma, Src beta, Dst y, float* mean, float* rstd,
                         int64_t rows, int64_t cols, float eps, Stream s);
// dgamma, dbeta accumulate (layernorm_param_grads, with its scratch); dx overwritten (may be dy).
Status layernorm_backward(Src dy, Src x, Src gamma, const float* mean, const float* rstd, Dst dx, Dst dgamma,
                          Dst dbeta, int64_t rows, int64_t cols, float* scratch,
                          Stream s);
Status rmsnorm_forward(Src x, Src gamma, Dst y, float* rstd, int64_t rows, int64_t cols, float eps, Stream s);
// dgamma accumulates (rmsnorm_param_grad, with its scratch); dx overwritten (may be dy).
Status rmsnorm_backward(Src dy, Src x, Src gamma, const float* rstd, Dst dx, Dst dgamma, int64_t rows, int64_t cols,
                        float* scratch, Stream s);
// y = softmax(scale·x) per row over its first `live` entries, 0 beyond: live = cols for a plain
// softmax; with causal, row r of a [groups·T, T] matrix sees entries 0..(r mod T).
Status softmax_forward(Src x, Dst y, int64_t rows, int64_t cols, float scale, bool causal, Stream s);
Status softmax_backward(Src y, Src dy, Dst dx, int64_t rows, int64_t cols, float scale,
                        bool causal, Stream s);
// The shape and masks of model.h's masked_softmax_forward: key s visible to query t of sequence b
// when s < key_len[b·key_len_ld] (device; null: every key) and, causal, s ≤ t + Tk − Tq.
struct ScoreMasks {
  const int32_t* key_len;
  int64_t key_len_ld, batch, heads, Tq, Tk;
  bool causal;
};
// probs = softmax(scores + bias) over each row's visible keys, 0 elsewhere (a row that sees none:
// zeros); bias [heads, Tq, Tk] or null. probs may be scores.
Status masked_softmax_forward(Src scores, Src bias, Dst probs, const ScoreMasks& m, Stream s);
// probs = softmax(logits) per row; per row r with targets[r] ≥ 0: loss[r] = −log p[t] (from
// log-sum-exp) and hit[r] = (first argmax == t); rows with targets < 0 get loss 0, hit 0.
Status cross_entropy_forward(Src logits, const int32_t* targets, Dst probs, double* loss, int32_t* hit,
                             int64_t rows, int64_t cols, Stream s);

}  // namespace dscpp::DSCPP_CUDA_NS::ops
