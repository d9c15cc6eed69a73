// The composite ops of the CUDA table: causal attention as per-sequence batched GEMMs over the
// heads around the causal softmax kernels (ABI 2), attention without T² scores (ABI 3: cuDNN,
// or blocks of queries on the same GEMMs with ops_attention.cu's row kernels), T5's relative
// position bias and masked softmax (ABI 8), and linear layers as one GEMM plus the fused
// bias/residual/GELU epilogue. The CPU table fuses more (it skips the masked half of the
// attention GEMMs); the results agree to fp32 rounding, not bit for bit.
#include "core/error.h"
#include "kernels/cuda/compute_type.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/cuda/ops_table.h"
#include "kernels/ops_args.h"  // the CPU table's argument rules

#include <algorithm>

#if !defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/lt_linear.h"
#endif

namespace dscpp::DSCPP_CUDA_NS {

using kernels::bad_ptr;
using kernels::fits_int32;
using kernels::relative_bias_args_ok;

namespace {

// Element i of a tensor in the table's compute dtype.
const void* at(const dscpp_ops* o, const void* p, int64_t i) {
  return static_cast<const char*>(p) + i * storage_bytes(storage_of(o->dtype));
}

void* at(const dscpp_ops* o, void* p, int64_t i) {
  return static_cast<char*>(p) + i * storage_bytes(storage_of(o->dtype));
}

bool attention_args_ok(int64_t batch, int64_t T, int64_t heads, int64_t head_dim) {
  return batch >= 0 && T >= 0 && heads >= 0 && head_dim >= 0 && fits_int32(3 * heads * head_dim) &&
         fits_int32(batch * heads * T);
}

// The entries that keep no T² matrix (ABI 3): under a 16-bit compute dtype or 16-bit GEMM math
// cuDNN's fused attention where this build and GPU have it (cudnn_attention.h), else blockwise
// attention on the table's GEMMs and the row kernels of ops_attention.cu.
#if !defined(DSCPP_CUDA_HOST_STUB)
// The 16-bit type cuDNN computes in for a table of storage st, or fp32 when it does not apply.
kernels::GemmMath cudnn_math(const OpsContext& c, Storage st) {
  if (st != Storage::f32) return st == Storage::bf16 ? kernels::GemmMath::bf16 : kernels::GemmMath::fp16;
  return stages_operands(c.gemm_math) ? c.gemm_math : kernels::GemmMath::fp32;
}

CudnnAttention* cudnn_for(OpsContext& c, kernels::GemmMath math) {
  if (math == kernels::GemmMath::fp32) return nullptr;
  if (!c.cudnn_attention_tried) {
    c.cudnn_attention_tried = true;
    c.cudnn_attention = CudnnAttention::create(c.stream);
  }
  return c.cudnn_attention.get();
}

#endif

bool flash_args_ok(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, float scale) {
  return attention_args_ok(batch, T, heads, head_dim) && scale == scale;
}

// Blockwise attention (ops_attention.cu): q, k, v (and out, dout) copied head-major, then per
// block of up to 128 queries one GEMM over every (sequence, head) pair for the scores against
// the keys the block sees (causal: up to its last query), the row kernels, and the GEMMs that
// finish the block. 128 queries keep a block's scores at pairs·128·T floats (48 MiB for 96
// pairs at T = 1024) and skip 7/16 of the masked products at T = 1024. The scratch (the
// context's `attention` block) holds 4 head-major tensors and one block of scores forward, 7
// and two blocks backward: 264 MiB for the gpt benchmark's 8 × 1024 × 768.
constexpr int64_t kQueryBlock = 128;

struct Blocks {
  OpsContext& c;
  int64_t batch, T, heads, D;
  float scale;
  const int32_t* first_key = nullptr;  // the masked entries' (ops::AttentionBlock)
  int64_t first_ld = 0;
  int64_t pairs() const { return batch * heads; }
  ops::FlashShape shape() const { return {batch, T, heads, D, scale, first_key, first_ld}; }
  bool tiled() const { return c.tiled_attention && ops::flash_tiles_fit(batch, T, heads, D); }
  int64_t n() const { return batch * heads * T * D; }           // elements of one head-major tensor
  int64_t block_floats() const { return pairs() * std::min(kQueryBlock, T) * T; }
  template <class Each>
  int each(Each&& body) const {  // body(block) for every block of queries, in order
    for (int64_t q0 = 0; q0 < T; q0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, T - q0);
      if (int s = body(ops::AttentionBlock{0, pairs(), T, q0, rows, q0 + rows, first_key, first_ld, heads})) return s;
    }
    return DSCPP_OK;
  }
  // C[pair][M×N] (+)= op(A)·op(B) over every pair, all fp32; head-major operands are T·D apart,
  // a block's scores M·N apart. Staged to 16 bits under 16-bit math.
  int gemm(dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* Cm, int64_t ldc, int64_t sc) const {
    const void* As = c.operand(0, A, Storage::f32, operand_span(ta, M, K, lda, sa, pairs()));
    const void* Bs = c.operand(1, B, Storage::f32, operand_span(tb, K, N, ldb, sb, pairs()));
    return gemm_on(c, c.operand_storage(Storage::f32), Storage::f32, ta, tb, M, N, K, 1.0f, As, lda, sa, Bs, ldb, sb,
                   beta, Cm, ldc, sc, pairs());
  }
  // The queries of a block (rows of x from q0) times the keys it sees, transposed: [rows × keys].
  int rows_by_keys(const ops::AttentionBlock& k, const float* x, const float* keys, float* out) const {
    return gemm(DSCPP_NO_TRANS, DSCPP_TRANS, k.rows, k.keys, D, x + k.q0 * D, D, T * D, keys, D, T * D, 0.0f, out,
                k.keys, k.rows * k.keys);
  }
  int to_heads(Src src, int64_t width, int64_t offset, float* dst) const {
    return status(ops::attention_to_heads(src, width, offset, dst, batch, T, heads, D, c.stream));
  }
  int from_heads(const float* src, Dst dst, int64_t width, int64_t offset) const {
    return status(ops::attention_from_heads(src, dst, width, offset, batch, T, heads, D, c.stream));
  }
};

int blockwise_forward(OpsContext& c, const Blocks& bl, Src qkv, float* lse, Dst out) {
  const int64_t n = bl.n(), C = bl.heads * bl.D, D = bl.D, T = bl.T;
  float* q = c.attention.get<float>(size_t(4 * n + bl.block_floats()), c.stream);
  float *k = q + n, *v = k + n, *o = v + n, *s = o + n;
  int st = bl.to_heads(qkv, 3 * C, 0, q);
  if (!st) st = bl.to_heads(qkv, 3 * C, C, k);
  if (!st) st = bl.to_heads(qkv, 3 * C, 2 * C, v);
  if (!st) st = bl.each([&](const ops::AttentionBlock& b) {
    if (int e = bl.rows_by_keys(b, q, k, s)) return e;
    if (int e = status(ops::attention_block_softmax(s, lse, b, bl.scale, c.stream))) return e;
    return bl.gemm(DSCPP_NO_TRANS, DSCPP_NO_TRANS, b.rows, D, b.keys, s, b.keys, b.rows * b.keys, v, D, T * D, 0.0f,
                   o + b.q0 * D, D, T * D);
  });
  return st ? st : bl.from_heads(o, out, C, 0);
}

// Per block: p and ds from the recomputed scores and dout·vᵀ; dq = ds·k (each query once);
// dk += dsᵀ·q and dv += pᵀ·dout over the blocks.
int blockwise_backward(OpsContext& c, const Blocks& bl, Src qkv, Src out, const float* lse, Src dout, Dst dqkv,
                       float* delta) {
  const int64_t n = bl.n(), C = bl.heads * bl.D, D = bl.D, T = bl.T;
  float* q = c.attention.get<float>(size_t(7 * n + 2 * bl.block_floats()), c.stream);
  float *k = q + n, *v = k + n, *g = v + n, *dq = g + n, *dk = dq + n, *dv = dk + n, *s = dv + n;
  float* dp = s + bl.block_floats();
  int st = status(ops::attention_delta(out, dout, delta, bl.batch, T, bl.heads, D, c.stream));
  if (!st) st = bl.to_heads(qkv, 3 * C, 0, q);
  if (!st) st = bl.to_heads(qkv, 3 * C, C, k);
  if (!st) st = bl.to_heads(qkv, 3 * C, 2 * C, v);
  if (!st) st = bl.to_heads(dout, C, 0, g);
  if (!st) st = status(ops::fill(dk, 0.0f, 2 * n, c.stream));  // dk, dv accumulate over the blocks
  if (!st) st = bl.each([&](const ops::AttentionBlock& b) {
    const int64_t sc = b.rows * b.keys;
    int e = bl.rows_by_keys(b, q, k, s);
    if (!e) e = bl.rows_by_keys(b, g, v, dp);
    if (!e) e = status(ops::attention_block_grad(s, dp, lse, delta, b, bl.scale, c.stream));
    if (!e) e = bl.gemm(DSCPP_NO_TRANS, DSCPP_NO_TRANS, b.rows, D, b.keys, dp, b.keys, sc, k, D, T * D, 0.0f,
                        dq + b.q0 * D, D, T * D);
    if (!e) e = bl.gemm(DSCPP_TRANS, DSCPP_NO_TRANS, b.keys, D, b.rows, dp, b.keys, sc, q + b.q0 * D, D, T * D, 1.0f,
                        dk, D, T * D);
    if (!e) e = bl.gemm(DSCPP_TRANS, DSCPP_NO_TRANS, b.keys, D, b.rows, s, b.keys, sc, g + b.q0 * D, D, T * D, 1.0f,
                        dv, D, T * D);
    return e;
  });
  if (!st) st = bl.from_heads(dq, dqkv, 3 * C, 0);
  if (!st) st = bl.from_heads(dk, dqkv, 3 * C, C);
  return st ? st : bl.from_heads(dv, dqkv, 3 * C, 2 * C);
}

#if !defined(DSCPP_CUDA_HOST_STUB)
LtLinear* lt_for(OpsContext& c) {
  if (!c.lt_linear_tried) {
    c.lt_linear_tried = true;
    c.lt_linear = LtLinear::create(c.stream);
  }
  return c.lt_linear.get();
}
#endif

}  // namespace

namespace op {

// Per sequence b, over the heads as a strided batch (head h of q/k/v at column h·head_dim of
// its part of a 3C-wide row):
//   probs = causal_softmax(scale·q·kᵀ);  out = probs·v
int causal_attention_forward(const dscpp_ops* o, const void* qkv, void* probs, void* out, int64_t batch, int64_t T,
                             int64_t heads, int64_t head_dim, float scale) {
  if (int s = check_ops(o)) return s;
  const int64_t C = heads * head_dim, TT = T * T;
  if (!attention_args_ok(batch, T, heads, head_dim) || bad_ptr(qkv, batch * T * 3 * C) ||
      bad_ptr(probs, batch * heads * TT) || bad_ptr(out, batch * T * C))
    return DSCPP_E_INVALID_ARGUMENT;
  if (batch == 0 || T == 0 || heads == 0) return DSCPP_OK;
  for (int64_t b = 0; b < batch; ++b) {
    const void* q = at(o, qkv, b * T * 3 * C);
    if (int s = o->gemm_strided_batched(o, DSCPP_NO_TRANS, DSCPP_TRANS, T, T, head_dim, 1.0f, q, 3 * C, head_dim,
                                        at(o, q, C), 3 * C, head_dim, 0.0f, at(o, probs, b * heads * TT), T, TT, heads))
      return s;
  }
  if (int s = status(
          ops::softmax_forward(rd(o, probs), wr(o, probs), batch * heads * T, T, scale, true, ctx(o).stream)))
    return s;
  for (int64_t b = 0; b < batch; ++b) {
    if (int s = o->gemm_strided_batched(o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, T, head_dim, T, 1.0f,
                                        at(o, probs, b * heads * TT), T, TT, at(o, qkv, b * T * 3 * C + 2 * C), 3 * C,
                                        head_dim, 0.0f, at(o, out, b * T * C), C, head_dim, heads))
      return s;
  }
  return DSCPP_OK;
}

//   dprobs = dout·vᵀ;  dscores = causal_softmax_backward(probs, dprobs)·scale (in workspace);
//   dq = dscores·k;  dk = dscoresᵀ·q;  dv = probsᵀ·dout
int causal_attention_backward(const dscpp_ops* o, const void* qkv, const void* probs, const void* dout, void* dqkv,
                              void* workspace, int64_t batch, int64_t T, int64_t heads, int64_t head_dim, float scale) {
  if (int s = check_ops(o)) return s;
  const int64_t C = heads * head_dim, TT = T * T;
  if (!attention_args_ok(batch, T, heads, head_dim) || bad_ptr(qkv, batch * T * 3 * C) ||
      bad_ptr(probs, batch * heads * TT) || bad_ptr(dout, batch * T * C) || bad_ptr(dqkv, batch * T * 3 * C) ||
      bad_ptr(workspace, batch * heads * TT))
    return DSCPP_E_INVALID_ARGUMENT;
  if (batch == 0 || T == 0 || heads == 0) return DSCPP_OK;
  void* ws = workspace;
  for (int64_t b = 0; b < batch; ++b) {
    if (int s = o->gemm_strided_batched(o, DSCPP_NO_TRANS, DSCPP_TRANS, T, T, head_dim, 1.0f, at(o, dout, b * T * C), C,
                                        head_dim, at(o, qkv, b * T * 3 * C + 2 * C), 3 * C, head_dim, 0.0f,
                                        at(o, ws, b * heads * TT), T, TT, heads))
      return s;
  }
  if (int s = status(
          ops::softmax_backward(rd(o, probs), rd(o, ws), wr(o, ws), batch * heads * T, T, scale, true, ctx(o).stream)))
    return s;
  for (int64_t b = 0; b < batch; ++b) {
    const void* q = at(o, qkv, b * T * 3 * C);
    void* dq = at(o, dqkv, b * T * 3 * C);
    const void* ds = at(o, ws, b * heads * TT);
    const void* p = at(o, probs, b * heads * TT);
    const void* dy = at(o, dout, b * T * C);
    int s = o->gemm_strided_batched(o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, T, head_dim, T, 1.0f, ds, T, TT, at(o, q, C),
                                    3 * C, head_dim, 0.0f, dq, 3 * C, head_dim, heads);
    if (s == DSCPP_OK)
      s = o->gemm_strided_batched(o, DSCPP_TRANS, DSCPP_NO_TRANS, T, head_dim, T, 1.0f, ds, T, TT, q, 3 * C, head_dim,
                                  0.0f, at(o, dq, C), 3 * C, head_dim, heads);
    if (s == DSCPP_OK)
      s = o->gemm_strided_batched(o, DSCPP_TRANS, DSCPP_NO_TRANS, T, head_dim, T, 1.0f, p, T, TT, dy, C, head_dim, 0.0f,
                                  at(o, dq, 2 * C), 3 * C, head_dim, heads);
    if (s != DSCPP_OK) return s;
  }
  return DSCPP_OK;
}

}  // namespace op

namespace {

// The flash entries (the table checked), causal (first_key null) or masked: cuDNN's SDPA takes
// the causal ones under 16-bit math; the rest run the tiled kernels (ops_flash.cu) when
// DSCPP_FLASH_ATTENTION=tiled, else the blockwise path.
int flash_forward(const dscpp_ops* o, const Blocks& bl, const void* qkv, float* lse, void* out) {
  const int64_t n = bl.n();
  if (!flash_args_ok(bl.batch, bl.T, bl.heads, bl.D, bl.scale) || bad_ptr(qkv, 3 * n) || bad_ptr(out, n) ||
      bad_ptr(lse, bl.batch * bl.heads * bl.T))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  OpsContext& c = bl.c;
#if !defined(DSCPP_CUDA_HOST_STUB)
  const Storage st = storage_of(o->dtype);
  const kernels::GemmMath math = cudnn_math(c, st);
  if (CudnnAttention* a = bl.first_key == nullptr ? cudnn_for(c, math) : nullptr;
      a != nullptr && a->forward({bl.batch, bl.T, bl.heads, bl.D, bl.scale, math, st != Storage::f32}, qkv, lse, out))
    return DSCPP_OK;
#endif
  if (bl.tiled()) return status(ops::flash_tiles_forward(rd(o, qkv), lse, wr(o, out), bl.shape(), c.stream));
  return guarded([&] { return blockwise_forward(c, bl, rd(o, qkv), lse, wr(o, out)); });
}

int flash_backward(const dscpp_ops* o, const Blocks& bl, const void* qkv, const void* out, const float* lse,
                   const void* dout, void* dqkv, float* workspace) {
  const int64_t n = bl.n(), rows = bl.batch * bl.heads * bl.T;
  if (!flash_args_ok(bl.batch, bl.T, bl.heads, bl.D, bl.scale) || bad_ptr(qkv, 3 * n) || bad_ptr(out, n) ||
      bad_ptr(dout, n) || bad_ptr(dqkv, 3 * n) || bad_ptr(lse, rows) || bad_ptr(workspace, rows))
    return DSCPP_E_INVALID_ARGUMENT;
  if (n == 0) return DSCPP_OK;
  OpsContext& c = bl.c;
#if !defined(DSCPP_CUDA_HOST_STUB)
  const Storage st = storage_of(o->dtype);
  const kernels::GemmMath math = cudnn_math(c, st);
  if (CudnnAttention* a = bl.first_key == nullptr ? cudnn_for(c, math) : nullptr;
      a != nullptr &&
      a->backward({bl.batch, bl.T, bl.heads, bl.D, bl.scale, math, st != Storage::f32}, qkv, out, lse, dout, dqkv))
    return DSCPP_OK;
#endif
  if (bl.tiled())
    return status(ops::flash_tiles_backward(rd(o, qkv), rd(o, out), lse, rd(o, dout), wr(o, dqkv), workspace,
                                            bl.shape(), c.stream));
  return guarded([&] {
    return blockwise_backward(c, bl, rd(o, qkv), rd(o, out), lse, rd(o, dout), wr(o, dqkv), workspace);
  });
}

// A masked entry's blocks: first_key must cover every sequence's T queries.
bool masked_blocks(Blocks& bl, const int32_t* first_key, int64_t ld) {
  bl.first_key = first_key;
  bl.first_ld = ld;
  return first_key == nullptr || (ld >= 0 && (bl.batch <= 1 || ld >= bl.T));
}

}  // namespace

namespace op {

int flash_attention_forward(const dscpp_ops* o, const void* qkv, float* lse, void* out, int64_t batch, int64_t T,
                            int64_t heads, int64_t head_dim, float scale) {
  if (int s = check_ops(o)) return s;
  return flash_forward(o, Blocks{ctx(o), batch, T, heads, head_dim, scale}, qkv, lse, out);
}

int flash_attention_backward(const dscpp_ops* o, const void* qkv, const void* out, const float* lse, const void* dout,
                             void* dqkv, float* workspace, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                             float scale) {
  if (int s = check_ops(o)) return s;
  return flash_backward(o, Blocks{ctx(o), batch, T, heads, head_dim, scale}, qkv, out, lse, dout, dqkv, workspace);
}

int flash_attention_masked_forward(const dscpp_ops* o, const void* qkv, const int32_t* first_key, int64_t first_key_ld,
                                   float* lse, void* out, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                                   float scale) {
  if (int s = check_ops(o)) return s;
  Blocks bl{ctx(o), batch, T, heads, head_dim, scale};
  if (!masked_blocks(bl, first_key, first_key_ld)) return DSCPP_E_INVALID_ARGUMENT;
  return flash_forward(o, bl, qkv, lse, out);
}

int flash_attention_masked_backward(const dscpp_ops* o, const void* qkv, const int32_t* first_key,
                                    int64_t first_key_ld, const void* out, const float* lse, const void* dout,
                                    void* dqkv, float* workspace, int64_t batch, int64_t T, int64_t heads,
                                    int64_t head_dim, float scale) {
  if (int s = check_ops(o)) return s;
  Blocks bl{ctx(o), batch, T, heads, head_dim, scale};
  if (!masked_blocks(bl, first_key, first_key_ld)) return DSCPP_E_INVALID_ARGUMENT;
  return flash_backward(o, bl, qkv, out, lse, dout, dqkv, workspace);
}

// y = x·Wᵀ (+ bias + residual), gelu_out = gelu(y). A residual that is y itself enters the
// GEMM as β = 1; another residual is added by the epilogue. On a GPU (any compute dtype),
// cuBLASLt fuses the bias into the GEMM where it can (lt_linear.h). Under 16-bit GEMM math an
// fp32 table's x and W are cast once here and the GEMM reads the copies; a 16-bit table's GEMM
// reads them as they are.
int linear_forward(const dscpp_ops* o, const void* x, const void* W, const void* bias, const void* residual, void* y,
                   void* gelu_out, int64_t rows, int64_t in, int64_t out) {
  if (int s = check_ops(o)) return s;
  if (rows < 0 || in < 0 || out < 0 || bad_ptr(x, rows * in) || bad_ptr(W, out * in) || bad_ptr(y, rows * out))
    return DSCPP_E_INVALID_ARGUMENT;
  if (rows == 0 || out == 0) return DSCPP_OK;
  const bool residual_in_y = residual != nullptr && residual == y;
  OpsContext& c = ctx(o);
  const Storage st = storage_of(o->dtype);
  return guarded([&] {
    const void* xs = c.operand(0, x, st, rows * in);
    const void* Ws = c.operand(1, W, st, out * in);
#if !defined(DSCPP_CUDA_HOST_STUB)
    if (LtLinear* lt = lt_for(c); lt != nullptr && (residual == nullptr || residual_in_y) &&
                                  lt->forward(c.gemm_math, c.operand_storage(st), st, xs, Ws, bias, residual_in_y, y,
                                              rows, in, out))
      return gelu_out == nullptr ? int(DSCPP_OK)
                                 : status(ops::gelu_forward(rd(o, y), wr(o, gelu_out), rows * out, c.stream));
#endif
    if (int s = gemm_on(c, c.operand_storage(st), st, DSCPP_NO_TRANS, DSCPP_TRANS, rows, out, in, 1.0f, xs, in, 0, Ws,
                        in, 0, residual_in_y ? 1.0f : 0.0f, y, out, 0, 1))
      return s;
    return status(ops::bias_residual_gelu(wr(o, y), rd(o, bias), residual_in_y ? Src{} : rd(o, residual),
                                          wr(o, gelu_out), rows, out, c.stream));
  });
}

// dW += dyᵀ·x;  dbias += Σ_rows dy;  dx = dy·W, times gelu'(gelu_pre) when given. Under 16-bit
// GEMM math an fp32 table's dy is cast once for both GEMMs.
int linear_backward(const dscpp_ops* o, const void* dy, const void* x, const void* W, void* dW, void* dbias, void* dx,
                    const void* gelu_pre, int64_t rows, int64_t in, int64_t out) {
  if (int s = check_ops(o)) return s;
  if (rows < 0 || in < 0 || out < 0 || bad_ptr(dy, rows * out) || bad_ptr(x, rows * in) || bad_ptr(W, out * in) ||
      bad_ptr(dW, out * in))
    return DSCPP_E_INVALID_ARGUMENT;
  OpsContext& c = ctx(o);
  const Storage st = storage_of(o->dtype), ab = c.operand_storage(st);
  return guarded([&] {
    const void* dys = c.operand(0, dy, st, rows * out);
    const void* xs = c.operand(1, x, st, rows * in);
    bool fused_dW = false;
#if !defined(DSCPP_CUDA_HOST_STUB)
    // On a GPU: dW with the bias gradient from the same GEMM (into fp32 scratch, then added),
    // through cuBLASLt where it can (lt_linear.h).
    LtLinear* lt = rows > 0 && out > 0 && in > 0 ? lt_for(c) : nullptr;
    if (lt != nullptr && dbias != nullptr) {
      float* partial = c.scratch.get<float>(size_t(out), c.stream);
      fused_dW = lt->weight_and_bias_grad(c.gemm_math, ab, st, dys, xs, dW, partial, rows, in, out);
      if (fused_dW)
        if (int s = status(ops::axpy(1.0f, partial, wr(o, dbias), out, c.stream))) return s;
    }
#endif
    if (!fused_dW) {
      if (int s = gemm_on(c, ab, st, DSCPP_TRANS, DSCPP_NO_TRANS, out, in, rows, 1.0f, dys, out, 0, xs, in, 0, 1.0f, dW,
                          in, 0, 1))
        return s;
      if (dbias != nullptr)
        if (int s = o->bias_grad(o, dy, dbias, rows, out)) return s;
    }
    if (dx == nullptr) return int(DSCPP_OK);
    const void* Ws = c.operand(1, W, st, out * in);  // slot 1's x is read by a GEMM enqueued before
    if (int s = gemm_on(c, ab, st, DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, in, out, 1.0f, dys, out, 0, Ws, in, 0, 0.0f,
                        dx, in, 0, 1))
      return s;
    if (gelu_pre == nullptr) return int(DSCPP_OK);
    return status(ops::gelu_backward(rd(o, gelu_pre), rd(o, dx), wr(o, dx), rows * in, c.stream));
  });
}

// ---- attention with an additive bias (ABI 8: T5) ----

int relative_bias_forward(const dscpp_ops* o, const void* table, void* out, int64_t heads, int64_t Tq, int64_t Tk,
                          int64_t q0, int32_t bidirectional, int32_t num_buckets, int32_t max_distance) {
  if (int s = check_ops(o)) return s;
  if (!relative_bias_args_ok(heads, Tq, Tk, bidirectional, num_buckets, max_distance) ||
      bad_ptr(table, int64_t{num_buckets} * heads) || bad_ptr(out, heads * Tq * Tk))
    return DSCPP_E_INVALID_ARGUMENT;
  const ops::RelativeBias rb{heads, Tq, Tk, q0, bidirectional != 0, num_buckets, max_distance};
  return status(ops::relative_bias_forward(rd(o, table), wr(o, out), rb, ctx(o).stream));
}

int relative_bias_backward(const dscpp_ops* o, const void* dout, void* dtable, int64_t heads, int64_t Tq, int64_t Tk,
                           int64_t q0, int32_t bidirectional, int32_t num_buckets, int32_t max_distance) {
  if (int s = check_ops(o)) return s;
  if (!relative_bias_args_ok(heads, Tq, Tk, bidirectional, num_buckets, max_distance) ||
      bad_ptr(dtable, int64_t{num_buckets} * heads) || bad_ptr(dout, heads * Tq * Tk))
    return DSCPP_E_INVALID_ARGUMENT;
  const ops::RelativeBias rb{heads, Tq, Tk, q0, bidirectional != 0, num_buckets, max_distance};
  OpsContext& c = ctx(o);
  return guarded([&] {
    const int64_t n = ops::relative_bias_scratch_floats(rb);
    float* scratch = n == 0 ? nullptr : c.scratch.get<float>(size_t(n), c.stream);
    return status(ops::relative_bias_backward(rd(o, dout), wr(o, dtable), rb, scratch, c.stream));
  });
}

int masked_softmax_forward(const dscpp_ops* o, const void* scores, const void* bias, const int32_t* key_len,
                           int64_t key_len_ld, void* probs, int64_t batch, int64_t heads, int64_t Tq, int64_t Tk,
                           int32_t causal) {
  if (int s = check_ops(o)) return s;
  const int64_t rows = batch * heads * Tq;
  // bias and key_len are optional: null means none.
  if (batch < 0 || heads < 0 || Tq < 0 || Tk < 0 || (causal != 0 && Tq > Tk) || bad_ptr(scores, rows * Tk) ||
      bad_ptr(probs, rows * Tk) || (key_len != nullptr && key_len_ld < 1))
    return DSCPP_E_INVALID_ARGUMENT;
  const ops::ScoreMasks m{key_len, key_len_ld, batch, heads, Tq, Tk, causal != 0};
  return status(ops::masked_softmax_forward(rd(o, scores), rd(o, bias), wr(o, probs), m, ctx(o).stream));
}

}  // namespace op

}  // namespace dscpp::DSCPP_CUDA_NS
