/* dscpp model plugin ABI.
 *
 * A plugin is a shared object that exports one C symbol, `dscpp_model_entry`, returning a
 * `dscpp_model_api`. The runtime refuses a plugin whose ABI version or struct sizes differ
 * from its own and names both versions.
 *
 * Contract in one paragraph: a model is a sequence of layers. Each layer declares its
 * parameters (name, shape, init rule) and the activation memory it needs per sample; the
 * runtime allocates every parameter, gradient, activation and optimizer buffer, decides where
 * it lives (device, host, partitioned) and hands the layer pointers to it for the duration of
 * one call. A layer computes only through the `dscpp_ops` table, which is bound to the rank's
 * device, so one compiled plugin runs on CPU or GPU. The last layer is the loss layer. The
 * plugin also declares its data (split sizes, per-sample input/target shapes) and loads one
 * sample by index into host buffers; sampling, shuffling and batching are the runtime's.
 *
 * Pointer conventions:
 *  - "device" pointers (parameters, gradients, activations, workspace) may only be touched
 *    through `dscpp_ops`; "host" pointers (load_sample buffers, metrics) are plain memory.
 *  - Floating tensors are in `ops->dtype` (the compute dtype: fp32, or bf16 / fp16 in a run with
 *    that precision on a device whose table computes in 16 bits, as the CUDA table does);
 *    layer 0's float data input arrives in it too. Statistics the ops keep in fp32 say so
 *    (layer-norm mean/rstd, attention's lse). Token ids and class labels are int32.
 *    Matrices are row-major.
 *  - Gradients of parameters ACCUMULATE: backward adds into `grads[i]` (the runtime zeroes
 *    them when it needs to); `grads[i]` is NULL for a frozen parameter (ABI 10), whose gradient
 *    backward skips while the input's still flows. `grad_input` is OVERWRITTEN.
 *
 * Errors: every call returns a `dscpp_status`; on failure the plugin writes a message into
 * `err` (NUL-terminated, truncated to DSCPP_ERROR_CAP) and the runtime prints it with the
 * layer's name.
 */
#ifndef DSCPP_MODEL_H
#define DSCPP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bump on any change to a struct below or to the meaning of a call. */
#define DSCPP_MODEL_ABI_VERSION                                               \
  10u /* 2: causal attention and linear layers; 3: flash attention; 4: 16-bit \
      compute dtypes reach layers, layer 0's float input included; 5: the     \
      ops of Llama-style models (RMSNorm, RoPE, SiLU/SwiGLU, multiply,        \
      strided copies); 6: masked flash attention (documents packed in         \
      a window), every layer sees the data input; 7: parameter                \
      roles; 8: encoder-decoder models (T5's relative position bias,          \
      masked softmax with a bias, an encoder's output in decode calls,        \
      several sequences per decode call); 9: micro-batches padded to          \
      their own longest sample (batch_lengths, stream_len); 10: frozen        \
      and adapter parameters, NULL gradients of frozen ones, dropout */
#define DSCPP_MAX_DIMS 4
#define DSCPP_ERROR_CAP 512

typedef enum dscpp_status {
  DSCPP_OK = 0,
  DSCPP_E_INVALID_ARGUMENT = 1, /* bad plugin argument, shape or index */
  DSCPP_E_IO = 2,               /* a data file could not be read */
  DSCPP_E_UNSUPPORTED = 3,      /* e.g. an op asked for a dtype it does not implement */
  DSCPP_E_NUMERIC = 4,          /* NaN/Inf where the layer cannot continue */
  DSCPP_E_INTERNAL = 5
} dscpp_status;

typedef enum dscpp_dtype { DSCPP_F32 = 0, DSCPP_F16 = 1, DSCPP_BF16 = 2, DSCPP_I32 = 3 } dscpp_dtype;

typedef struct dscpp_error {
  char message[DSCPP_ERROR_CAP];
} dscpp_error;

/* ---- device ops ------------------------------------------------------------------------
 * Every op takes the table itself first (it carries the device binding) and returns a
 * status. Sizes are element counts. Row-major throughout. */
typedef enum dscpp_transpose { DSCPP_NO_TRANS = 0, DSCPP_TRANS = 1 } dscpp_transpose;

/* Rotary embedding frequencies (ABI 5): inv_freq[i] = theta^(−2i/rotary_dim), i < rotary_dim/2, then
 * Llama 3's rescaling when llama3_factor > 0 (Hugging Face's rope_type "llama3"): a wavelength
 * 2π/f above original_max_position/low_freq_factor divides f by the factor, one below
 * original_max_position/high_freq_factor keeps it, and between the two f blends linearly in
 * s = (original_max_position/wavelength − low_freq_factor)/(high_freq_factor − low_freq_factor):
 * (1 − s)·f/factor + s·f. linear_factor > 0 then divides every frequency by it (rope_type "linear"). */
typedef struct dscpp_rope {
  float theta;            /* rope_theta, e.g. 10000 */
  int32_t rotary_dim;     /* even, ≤ head_dim (and ≤ 256); 0 = head_dim */
  int32_t interleaved;    /* 0: rotate_half pairs (i, i + d/2); 1: adjacent pairs (2i, 2i + 1) */
  float llama3_factor;    /* 0: no Llama 3 rescaling */
  float low_freq_factor, high_freq_factor, original_max_position;
  float linear_factor;    /* 0: none */
} dscpp_rope;

typedef struct dscpp_ops dscpp_ops;
struct dscpp_ops {
  uint32_t struct_size;
  dscpp_dtype dtype; /* the compute dtype of floating tensors */
  void* device;      /* runtime-private binding */

  /* C[M×N] = alpha·op(A)·op(B) + beta·C; op(A) is M×K, op(B) is K×N; lda/ldb/ldc are the
   * row strides of the stored (untransposed) matrices. */
  int (*gemm)(const dscpp_ops*, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K,
              float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
              int64_t ldc);
  /* `batch` independent GEMMs; matrix i starts at X + i·strideX elements. */
  int (*gemm_strided_batched)(const dscpp_ops*, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N,
                              int64_t K, float alpha, const void* A, int64_t lda, int64_t stride_a, const void* B,
                              int64_t ldb, int64_t stride_b, float beta, void* C, int64_t ldc, int64_t stride_c,
                              int64_t batch);

  /* Elementwise. y may alias x (or a/b) unless stated. */
  int (*fill)(const dscpp_ops*, void* x, float value, int64_t n);
  int (*copy)(const dscpp_ops*, const void* x, void* y, int64_t n);
  int (*add)(const dscpp_ops*, const void* a, const void* b, void* y, int64_t n); /* y = a + b */
  int (*axpy)(const dscpp_ops*, float alpha, const void* x, void* y, int64_t n);  /* y += alpha·x */
  int (*scale)(const dscpp_ops*, float alpha, void* x, int64_t n);                /* x *= alpha */

  /* x[r,c] += bias[c]  |  dbias[c] += Σ_r dy[r,c] */
  int (*bias_add)(const dscpp_ops*, void* x, const void* bias, int64_t rows, int64_t cols);
  int (*bias_grad)(const dscpp_ops*, const void* dy, void* dbias, int64_t rows, int64_t cols);

  /* GELU with the tanh approximation (GPT-2's); backward: dx = dy·gelu'(x). */
  int (*gelu_forward)(const dscpp_ops*, const void* x, void* y, int64_t n);
  int (*gelu_backward)(const dscpp_ops*, const void* x, const void* dy, void* dx, int64_t n);
  int (*relu_forward)(const dscpp_ops*, const void* x, void* y, int64_t n);
  int (*relu_backward)(const dscpp_ops*, const void* x, const void* dy, void* dx, int64_t n);

  /* Layer norm over the last dim. mean/rstd: `rows` floats each (always fp32), saved for
   * backward. Backward overwrites dx and accumulates dgamma/dbeta. */
  int (*layernorm_forward)(const dscpp_ops*, const void* x, const void* gamma, const void* beta, void* y,
                           float* mean, float* rstd, int64_t rows, int64_t cols, float eps);
  int (*layernorm_backward)(const dscpp_ops*, const void* dy, const void* x, const void* gamma, const float* mean,
                            const float* rstd, void* dx, void* dgamma, void* dbeta, int64_t rows, int64_t cols);

  /* Row softmax and its backward: dx = y·(dy − Σ dy·y). */
  int (*softmax_forward)(const dscpp_ops*, const void* x, void* y, int64_t rows, int64_t cols);
  int (*softmax_backward)(const dscpp_ops*, const void* y, const void* dy, void* dx, int64_t rows, int64_t cols);

  /* Attention pieces for `groups` independent T×T score matrices (one per batch×head):
   * probs[t,s] = softmax_{s≤t}(scale·scores[t,s]), 0 for s > t (causal mask).
   * Backward: dscores = scale·probs·(dprobs − Σ_s dprobs·probs). */
  int (*causal_softmax_forward)(const dscpp_ops*, const void* scores, void* probs, int64_t groups, int64_t T,
                                float scale);
  int (*causal_softmax_backward)(const dscpp_ops*, const void* probs, const void* dprobs, void* dscores,
                                 int64_t groups, int64_t T, float scale);

  /* out[i,:] = table[ids[i],:]  |  dtable[ids[i],:] += dout[i,:]. ids outside [0, vocab) fail. */
  int (*embedding_forward)(const dscpp_ops*, const int32_t* ids, const void* table, void* out, int64_t n,
                           int64_t vocab, int64_t dim);
  int (*embedding_backward)(const dscpp_ops*, const int32_t* ids, const void* dout, void* dtable, int64_t n,
                            int64_t vocab, int64_t dim);

  /* Softmax cross-entropy over `rows` rows of `cols` logits. Targets < 0 are ignored.
   * Forward writes softmax probabilities to `probs` (kept for backward) and returns on the
   * host: Σ −log p[target] (fp64), the number of counted rows, and how many rows' argmax
   * equals the target. Backward: dlogits = scale·(probs − onehot(target)) for counted rows,
   * 0 for ignored ones (overwrites). */
  int (*cross_entropy_forward)(const dscpp_ops*, const void* logits, const int32_t* targets, void* probs,
                               int64_t rows, int64_t cols, double* loss_sum, int64_t* counted, int64_t* correct);
  int (*cross_entropy_backward)(const dscpp_ops*, const void* probs, const int32_t* targets, void* dlogits,
                                int64_t rows, int64_t cols, float scale);

  /* Device ↔ host copies (bytes), for plugins that must look at values (e.g. sampling). */
  int (*to_host)(const dscpp_ops*, const void* device_src, void* host_dst, size_t bytes);
  int (*from_host)(const dscpp_ops*, const void* host_src, void* device_dst, size_t bytes);

  /* ---- ABI 2 ---- */
  /* Causal multi-head self-attention (GPT-2's), fused: the same result as scores = q·kᵀ per
   * head (gemm_strided_batched), causal_softmax_forward(scale), out = probs·v, without the
   * masked half of the work. Layouts for `batch` sequences of T tokens, C = heads·head_dim:
   *   qkv   batch × T × 3C; each row is [q | k | v], head h at columns h·head_dim … of each part
   *   probs batch × heads × T × T (written; keep it for backward): softmax over s ≤ t of
   *         scale·q_t·k_s, exactly 0 for s > t
   *   out   batch × T × C, head h at columns h·head_dim …: out_t = Σ_s probs[t,s]·v_s
   * Backward overwrites dqkv (layout of qkv) from dout (layout of out), with
   *   dprobs = dout·vᵀ, dscores = scale·probs·(dprobs − Σ_s dprobs·probs),
   *   dq = dscores·k, dk = dscoresᵀ·q, dv = probsᵀ·dout;
   * workspace: batch × heads × T × T elements of scratch. */
  int (*causal_attention_forward)(const dscpp_ops*, const void* qkv, void* probs, void* out, int64_t batch,
                                  int64_t T, int64_t heads, int64_t head_dim, float scale);
  int (*causal_attention_backward)(const dscpp_ops*, const void* qkv, const void* probs, const void* dout, void* dqkv,
                                   void* workspace, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                                   float scale);

  /* A fully connected layer, torch.nn.Linear's layout (W stored [out, in]), in one pass over y:
   *   y[rows×out] = x[rows×in]·Wᵀ + bias + residual    (bias [out] and residual [rows×out] may
   *                                                       be NULL; residual may be y itself)
   *   gelu_out = gelu(y) when non-NULL (tanh form; y keeps the pre-activation for backward).
   * Backward, for the layer whose output was y:
   *   dW += dyᵀ·x;  dbias += Σ_rows dy (dbias may be NULL);  dx = dy·W (overwritten; NULL skips)
   *   with gelu_pre non-NULL, x was gelu(gelu_pre) and dx is taken through that GELU:
   *   dx = (dy·W) ⊙ gelu'(gelu_pre), the gradient of the GELU's input (layout of dx). */
  int (*linear_forward)(const dscpp_ops*, const void* x, const void* W, const void* bias, const void* residual,
                        void* y, void* gelu_out, int64_t rows, int64_t in, int64_t out);
  int (*linear_backward)(const dscpp_ops*, const void* dy, const void* x, const void* W, void* dW, void* dbias,
                         void* dx, const void* gelu_pre, int64_t rows, int64_t in, int64_t out);

  /* ---- ABI 3 ---- */
  /* Causal multi-head self-attention that keeps no T×T matrix (FlashAttention's contract): the
   * layouts and `out` of causal_attention_forward, but forward saves per query only
   *   lse   batch × heads × T, fp32 (whatever the compute dtype): log Σ_{s≤t} exp(scale·q_t·k_s)
   * and backward overwrites dqkv from qkv, forward's out and lse, and dout, recomputing the
   * probabilities; workspace: batch × heads × T floats of scratch. Activation memory per
   * layer falls from batch·heads·T² elements to batch·heads·T floats. */
  int (*flash_attention_forward)(const dscpp_ops*, const void* qkv, float* lse, void* out, int64_t batch, int64_t T,
                                 int64_t heads, int64_t head_dim, float scale);
  int (*flash_attention_backward)(const dscpp_ops*, const void* qkv, const void* out, const float* lse,
                                  const void* dout, void* dqkv, float* workspace, int64_t batch, int64_t T,
                                  int64_t heads, int64_t head_dim, float scale);

  /* ---- ABI 5 ---- */
  /* y = a ⊙ b. */
  int (*mul)(const dscpp_ops*, const void* a, const void* b, void* y, int64_t n);
  /* SiLU, y = x·σ(x); backward: dx = dy·σ(x)·(1 + x·(1 − σ(x))). */
  int (*silu_forward)(const dscpp_ops*, const void* x, void* y, int64_t n);
  int (*silu_backward)(const dscpp_ops*, const void* x, const void* dy, void* dx, int64_t n);
  /* SwiGLU's gate, y = silu(gate) ⊙ up; backward overwrites dgate = dy·up·silu'(gate) and
   * dup = dy·silu(gate). dgate may alias gate and dup may alias up (each element is read before
   * it is written); dy may alias neither output. */
  int (*swiglu_forward)(const dscpp_ops*, const void* gate, const void* up, void* y, int64_t n);
  int (*swiglu_backward)(const dscpp_ops*, const void* gate, const void* up, const void* dy, void* dgate, void* dup,
                         int64_t n);

  /* RMSNorm over the last dim: y = (x·rstd)·gamma, rstd = 1/sqrt(mean(x²) + eps), `rows` floats
   * (always fp32) saved for backward. Backward overwrites dx (may alias dy) with
   * rstd·(g − x̂·mean(g·x̂)), g = dy·gamma, x̂ = x·rstd, and accumulates dgamma += Σ_rows dy·x̂. */
  int (*rmsnorm_forward)(const dscpp_ops*, const void* x, const void* gamma, void* y, float* rstd, int64_t rows,
                         int64_t cols, float eps);
  int (*rmsnorm_backward)(const dscpp_ops*, const void* dy, const void* x, const void* gamma, const float* rstd,
                          void* dx, void* dgamma, int64_t rows, int64_t cols);

  /* Rotary position embedding, in place, on heads 0 … heads−1 of each of the batch × T rows of x
   * (row stride `width` elements, head h at columns h·head_dim …; with a packed [q | k | v] row,
   * heads = q heads + kv heads rotates q and k together). Row t of each sequence has position
   * positions[b·T + t] (device int32) or, with positions NULL, pos0 + t. Within a head the first
   * rope->rotary_dim columns (all when 0) are rotated in pairs by angle position·inv_freq[i]:
   * pairs (i, i + rotary_dim/2) (Hugging Face's rotate_half) or (2i, 2i + 1) (Meta's, when
   * `interleaved`); the rest pass through. Backward rotates the gradient by the opposite angle. */
  int (*rope_forward)(const dscpp_ops*, void* x, int64_t batch, int64_t T, int64_t width, int64_t heads,
                      int64_t head_dim, const int32_t* positions, int64_t pos0, const struct dscpp_rope* rope);
  int (*rope_backward)(const dscpp_ops*, void* dx, int64_t batch, int64_t T, int64_t width, int64_t heads,
                       int64_t head_dim, const int32_t* positions, int64_t pos0, const struct dscpp_rope* rope);

  /* dst[r, c] = src[r, c] (accumulate = 0) or dst[r, c] += src[r, c] (1) for a rows × cols block
   * of two row-major matrices with row strides src_ld and dst_ld: slicing and gathering columns
   * (e.g. repeating grouped-query k/v heads, and summing their gradients back). The blocks must
   * not overlap. */
  int (*copy_2d)(const dscpp_ops*, const void* src, int64_t src_ld, void* dst, int64_t dst_ld, int64_t rows,
                 int64_t cols, int32_t accumulate);

  /* ---- ABI 6 ---- */
  /* flash_attention_* where query t of sequence b sees keys first_key[b·first_key_ld + t] … t
   * only (device int32; a value below 0 counts as 0, above t as t): documents packed end to end
   * in one window, each query attending within its own document (Megatron's
   * reset_attention_mask), or a sliding window. first_key NULL: every key s ≤ t (the causal
   * entries above). Layouts, lse and workspace as flash_attention_*; backward takes the same
   * first_key as forward. */
  int (*flash_attention_masked_forward)(const dscpp_ops*, const void* qkv, const int32_t* first_key,
                                        int64_t first_key_ld, float* lse, void* out, int64_t batch, int64_t T,
                                        int64_t heads, int64_t head_dim, float scale);
  int (*flash_attention_masked_backward)(const dscpp_ops*, const void* qkv, const int32_t* first_key,
                                         int64_t first_key_ld, const void* out, const float* lse, const void* dout,
                                         void* dqkv, float* workspace, int64_t batch, int64_t T, int64_t heads,
                                         int64_t head_dim, float scale);

  /* ---- ABI 8 ---- */
  /* T5's relative position bias: out[h, t, s] = table[bucket(s − (q0 + t)), h] for heads × Tq × Tk
   * (query t at position q0 + t, key s at position s; table [num_buckets, heads]). bucket(n) is
   * Hugging Face's _relative_position_bucket: bidirectional, half the buckets for n > 0 (offset
   * num_buckets/2) and half for n ≤ 0 taking |n|; causal, 0 for n > 0 and −n otherwise; then, with
   * B the buckets left and e = B/2, a distance d < e is its own bucket and a larger one is
   * min(B − 1, e + (int)(logf(d/e) / logf(max_distance/e) · (B − e))), in fp32 as torch computes it.
   * Backward: dtable[bucket(…), h] += dout[h, t, s] (accumulates). */
  int (*relative_bias_forward)(const dscpp_ops*, const void* table, void* out, int64_t heads, int64_t Tq, int64_t Tk,
                               int64_t q0, int32_t bidirectional, int32_t num_buckets, int32_t max_distance);
  int (*relative_bias_backward)(const dscpp_ops*, const void* dout, void* dtable, int64_t heads, int64_t Tq,
                                int64_t Tk, int64_t q0, int32_t bidirectional, int32_t num_buckets,
                                int32_t max_distance);
  /* Softmax of `batch` × heads attention score matrices Tq × Tk with an additive bias and masks:
   *   probs[b,h,t,s] = softmax over the visible s of scores[b,h,t,s] + bias[h,t,s], 0 elsewhere;
   * bias [heads, Tq, Tk] shared by the batch (NULL: none); key s is visible to query t when
   * s < key_len[b·key_len_ld] (device int32, one per sequence, e.g. each sample's source length
   * in the data input; NULL: every key) and, with causal, when s ≤ t + Tk − Tq. A query that sees
   * no key gets zeros. probs may alias scores. The backward is softmax_backward over the
   * batch·heads·Tq rows (masked entries have probability 0), and the bias's gradient bias_grad
   * over the batch rows of heads·Tq·Tk. */
  int (*masked_softmax_forward)(const dscpp_ops*, const void* scores, const void* bias, const int32_t* key_len,
                                int64_t key_len_ld, void* probs, int64_t batch, int64_t heads, int64_t Tq, int64_t Tk,
                                int32_t causal);

  /* ---- ABI 10 ---- */
  /* Dropout with a mask drawn from (seed, element index) alone, so nothing is stored: y[i] =
   * x[i]·(keep(i) ? s : 0), s = 1/(1 − p) rounded to fp32 (torch.nn.Dropout in training; a dropped
   * NaN stays NaN). keep(i) is a counter-based draw, output i (from 0) of a SplitMix64 generator
   * whose state starts at splitmix64(seed), in 64-bit wrapping arithmetic, γ = 0x9E3779B97F4A7C15:
   *   splitmix64(z): z += γ; z = (z ^ z >> 30)·0xBF58476D1CE4E5B9; z = (z ^ z >> 27)·0x94D049BB133111EB;
   *                  return z ^ z >> 31
   *   bits(i) = splitmix64(splitmix64(seed) + i·γ)
   *   keep(i) = (bits(i) >> 32) ≥ ⌊p·2³²⌋   (probability 1 − p, to 2⁻³²)
   * Every table draws the same mask (kernels/ops_math.h's dropout functions). The backward is the
   * same call on the gradient with the same seed (the derivative is the same mask). y may alias x;
   * p = 0 copies; p outside [0, 1) fails. */
  int (*dropout)(const dscpp_ops*, const void* x, void* y, int64_t n, float p, uint64_t seed);
};

/* ---- what a model declares ---------------------------------------------------------- */
typedef enum dscpp_init_kind {
  DSCPP_INIT_ZEROS = 0,
  DSCPP_INIT_ONES = 1,
  DSCPP_INIT_CONSTANT = 2, /* value a */
  DSCPP_INIT_NORMAL = 3,   /* mean 0, standard deviation a */
  DSCPP_INIT_UNIFORM = 4   /* uniform in [−a, a) */
} dscpp_init_kind;

/* What a parameter is to the optimizer (ABI 7): the Hugging Face Trainer's default optimizer
 * gives biases and norm weights no weight decay, and some recipes exclude embeddings too
 * (the "dscpp" config section's no_weight_decay chooses). UNSPECIFIED: the runtime classifies
 * the parameter by its full name as transformers does: "bias" in it makes a bias; "norm",
 * "layernorm", "rmsnorm" or a GPT-2 style "ln_" component a norm; anything else a weight. */
typedef enum dscpp_param_role {
  DSCPP_ROLE_UNSPECIFIED = 0,
  DSCPP_ROLE_WEIGHT = 1,    /* a matrix (or other tensor) that weight decay applies to by default */
  DSCPP_ROLE_BIAS = 2,
  DSCPP_ROLE_NORM = 3,      /* a LayerNorm / RMSNorm scale or shift */
  DSCPP_ROLE_EMBEDDING = 4  /* a token or position embedding table */
} dscpp_param_role;

/* Initial values are a function of (seed, parameter's full name, element index) only, so any
 * rank can initialise any slice and every world size / ZeRO stage starts from one model. */
typedef struct dscpp_param_desc {
  const char* name; /* unique within the layer; the full name is "<layer>.<name>" unless full_name says */
  int32_t ndim;
  int64_t shape[DSCPP_MAX_DIMS];
  dscpp_init_kind init;
  float init_a;
  /* ---- ABI 5 ---- */
  /* The parameter's name in checkpoints and weight files (e.g. Hugging Face's
   * "model.layers.0.self_attn.q_proj.weight"), unique in the model; NULL: "<layer>.<name>". */
  const char* full_name;
  /* Shared parameters: the full name of a parameter an earlier layer declares. This layer then
   * uses that parameter (the same values; its gradient contributions are added into that
   * parameter's once per micro-step) instead of one of its own; shape must equal the owner's,
   * and init is ignored. NULL: an ordinary parameter. */
  const char* tied_to;
  /* Nonzero for a 2-D parameter that weight files store transposed, [shape[1], shape[0]] (GPT-2's
   * Conv1D weights in Hugging Face files): --init_from / a plugin's init_from and export
   * transpose it; in memory and in dscpp's own checkpoints it is [shape[0], shape[1]]. */
  int32_t file_transposed;
  /* ---- ABI 7 ---- */
  int32_t role; /* a dscpp_param_role */
  /* ---- ABI 10 ---- */
  /* Nonzero: the model asks that this parameter not be trained (PyTorch's requires_grad=False;
   * the runtime's --freeze / --train_only patterns freeze others as well). A frozen parameter
   * has no gradient, optimizer state or gradient traffic, and backward gets grads[i] = NULL for
   * it: the layer skips that weight gradient (its input gradient still flows). */
  int32_t frozen;
  /* Nonzero: an adapter parameter (a LoRA matrix, PEFT's): not in the base weights init_from
   * names, read from adapter_from instead, and written by `dscpp export-hf --adapter`. */
  int32_t adapter;
} dscpp_param_desc;

typedef struct dscpp_layer_desc {
  const char* name; /* unique within the model, e.g. "blocks.3" */
  int32_t num_params;
  const dscpp_param_desc* params; /* owned by the plugin, valid until destroy */
  /* Per sample: elements of the output (compute dtype), bytes kept from forward to backward,
   * bytes of scratch valid only within one call. */
  int64_t output_numel;
  int64_t saved_bytes;
  int64_t workspace_bytes;
  /* ---- ABI 5: decoding one token at a time (generation), when the model has `decode` ----
   * Per sequence: the bytes the layer keeps from one decode call to the next (e.g. every
   * position's keys and values: its KV cache), the scratch of one call, and the elements it
   * outputs per token (the loss layer: the next token's logits). */
  int64_t decode_cache_bytes;
  int64_t decode_workspace_bytes;
  int64_t decode_output_numel;
} dscpp_layer_desc;

typedef struct dscpp_data_desc {
  int64_t train_size; /* samples in the train split */
  int64_t eval_size;  /* samples in the eval split (may be 0) */
  dscpp_dtype input_dtype; /* DSCPP_F32 or DSCPP_I32: what load_sample writes (a float input is fp32
                              there, and reaches layer 0 in the compute dtype) */
  int64_t input_numel;     /* per sample */
  dscpp_dtype target_dtype; /* DSCPP_I32 */
  int64_t target_numel;     /* per sample */
  int64_t tokens_per_sample; /* for tokens/s; 0 when the model has no tokens */
} dscpp_data_desc;

typedef struct dscpp_model_desc {
  int32_t num_layers; /* ≥ 1; layer num_layers−1 is the loss layer */
  dscpp_data_desc data;
  /* ---- ABI 5 ---- */
  /* Weights the model starts from (e.g. a Hugging Face directory given to the plugin): a
   * .safetensors file, a sharded index (model.safetensors.index.json) or a directory holding
   * either; tensors by full name, file_transposed ones transposed. The runtime refuses a file
   * with a parameter missing or a tensor it does not use, unless init_partial (then missing
   * parameters keep their init rule and unused tensors are listed). NULL: none. --init_from on the
   * command line may not be given as well; --load_dir (resuming) takes precedence. */
  const char* init_from;
  int32_t init_partial;
  /* A JSON object (e.g. the Hugging Face config.json the model was built from) saved beside every
   * checkpoint as config.json, so that `dscpp export-hf` can write a directory transformers loads.
   * NULL: none. */
  const char* export_config;
  /* ---- ABI 8 ---- */
  /* An encoder-decoder: layers 0 … encoder_layers−1 are its encoder, which reads a sample's first
   * encoder_len + 1 ints of the data input, the source token ids padded to encoder_len and then
   * the number of real ones; layer encoder_layers−1 outputs the encoder's final states,
   * encoder_len × encoder_width per sample. Generation runs the encoder once per source and
   * decodes from layer encoder_layers on with that output as each call's memory. 0: a decoder
   * only (generation decodes from layer 0). */
  int32_t encoder_layers;
  int64_t encoder_len, encoder_width;
  /* An encoder-decoder's token ids for generation (read when encoder_layers > 0; −1: none): the
   * decoder's first input (T5's decoder_start_token_id), the end of a sequence, padding. */
  int32_t decoder_start_id, eos_id, pad_id;
  /* Other names weight files may hold a parameter under, as [alias, owner's full name] pairs ending
   * with a NULL alias (T5's encoder.embed_tokens.weight for shared.weight); reading weights treats
   * them as a shared parameter's names. NULL: none. */
  const char* const* weight_aliases;
  /* ---- ABI 10 ---- */
  /* The adapter parameters' initial values (dscpp_param_desc::adapter): a .safetensors file in
   * PEFT's naming, "base_model.model." + full name (PEFT's adapter_model.safetensors). NULL: they
   * keep their init rule. */
  const char* adapter_from;
  /* A JSON object saved beside every checkpoint as adapter_config.json (PEFT's), so that
   * `dscpp export-hf --adapter` writes a directory PeftModel.from_pretrained loads. NULL: none. */
  const char* adapter_config;
} dscpp_model_desc;

/* What the runtime tells the plugin at creation. */
typedef struct dscpp_host_info {
  uint32_t struct_size;
  int32_t rank, world_size, local_rank;
  dscpp_dtype compute_dtype;
  uint64_t seed;
  const char* device_name; /* "cpu", "cuda:0" */
  void* runtime;           /* pass back to log() */
  void (*log)(void* runtime, const char* message); /* rank-prefixed runtime log line */
} dscpp_host_info;

/* Loss-layer metrics for one micro-batch, filled by its forward (host memory). */
typedef struct dscpp_metrics {
  double loss_sum;  /* Σ per-row loss */
  int64_t counted;  /* rows that count towards the loss */
  int64_t correct;  /* rows whose prediction is right (classification / next token) */
} dscpp_metrics;

/* One forward or backward call of one layer. Pointers are valid for the call only. */
typedef struct dscpp_layer_ctx {
  uint32_t struct_size;
  const dscpp_ops* ops;
  int64_t batch;              /* samples in this micro-batch */
  int32_t training;           /* 0 in evaluation / inference */
  uint64_t rng_seed;          /* same for a layer's forward and its backward in one micro-step */
  const void* const* params;  /* [num_params] device, compute dtype */
  void* const* grads;         /* [num_params] device; backward accumulates; NULL in forward */
  const void* input;          /* batch × previous output_numel (layer 0: the data input, floats in
                                 the compute dtype) */
  void* output;               /* forward: batch × output_numel */
  void* saved;                /* batch × saved_bytes, written by forward, read by backward */
  void* workspace;            /* batch × workspace_bytes */
  const void* grad_output;    /* backward: d(loss)/d(output); NULL for the loss layer */
  void* grad_input;           /* backward: d(loss)/d(input), overwritten; NULL for layer 0 */
  /* Loss layer only. */
  const int32_t* target;      /* device, batch × target_numel; NULL when only predicting */
  dscpp_metrics* metrics;     /* host; forward adds into it */
  float loss_grad;            /* backward: d(total objective)/d(this micro-batch's mean loss) */
  /* ---- ABI 6 ---- */
  const void* data_input;     /* every layer, forward and backward: the micro-batch's data input
                                 (layer 0's `input`), e.g. each token's position in its document */
  /* ---- ABI 9 ---- */
  int64_t stream_len[2]; /* the positions per sample this micro-batch uses of each stream (an
                            encoder-decoder's source and target; a decoder's tokens in [0]), as
                            the model's batch_lengths said; 0: all the layer was sized for.
                            Rows are laid out for these lengths (batch·stream_len rows, tensor-
                            major); the data input and targets keep their full per-sample size. */
} dscpp_layer_ctx;

/* One decode call of one layer (ABI 5): one new token of each of `batch` sequences (ABI 8; before,
 * one) at `position`, their earlier positions in `cache` (zeroed before position 0, then only the
 * layer writes it). Sequence i's input, output, cache and workspace are the i-th block of each.
 * In an encoder-decoder (dscpp_model_desc::encoder_layers > 0) decoding starts at layer
 * encoder_layers, and every call sees the encoder's output as `memory`. */
typedef struct dscpp_decode_ctx {
  uint32_t struct_size;
  const dscpp_ops* ops;
  const void* const* params; /* [num_params] device, compute dtype (shared parameters included) */
  int64_t position;          /* 0-based; below the positions the layer sized its cache for */
  const void* input;         /* the first decoding layer: the token ids (device int32, one per sequence); else
                                the previous layer's outputs */
  void* output;              /* batch × decode_output_numel elements */
  void* cache;               /* batch × decode_cache_bytes */
  void* workspace;           /* batch × decode_workspace_bytes */
  /* ---- ABI 8 ---- */
  int64_t batch;             /* sequences in this call (≥ 1) */
  const void* memory;        /* encoder-decoder: the encoder's output, batch × memory_len × its width
                                (compute dtype), the same at every position; NULL otherwise */
  int64_t memory_len;        /* source positions per sequence in memory (ABI 9: at most the encoder's
                                length; the encoder ran with that stream_len) */
  const int32_t* memory_valid; /* device int32 per sequence: its source's real positions (the rest is
                                  padding no attention may see); NULL: all */
} dscpp_decode_ctx;

/* When the plugin wants to look at predictions (e.g. print a generated text), the runtime
 * lends it a forward pass: inputs are host samples, output is the loss layer's output
 * (batch × output_numel, converted to fp32) in host memory. */
typedef struct dscpp_infer {
  void* runtime;
  int64_t max_batch;
  int (*forward)(const struct dscpp_infer*, const void* inputs_host, int64_t batch, float* outputs_host,
                 dscpp_error* err);
} dscpp_infer;

typedef struct dscpp_model_api {
  uint32_t abi_version; /* DSCPP_MODEL_ABI_VERSION the plugin was built with */
  /* sizeof() of each ABI struct as the plugin saw them; checked at load. */
  uint32_t api_size, ops_size, layer_ctx_size, layer_desc_size, param_desc_size, host_info_size;
  const char* name;

  /* argv: the plugin's own arguments (after `--` on the command line), argv[0] = plugin path. */
  int (*create)(int argc, const char* const* argv, const dscpp_host_info* host, void** model, dscpp_error* err);
  void (*destroy)(void* model);
  int (*describe)(void* model, dscpp_model_desc* out, dscpp_error* err);
  int (*layer)(void* model, int32_t index, dscpp_layer_desc* out, dscpp_error* err);

  int (*forward)(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err);
  int (*backward)(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err);

  /* split: 0 = train, 1 = eval. Writes input_numel inputs and target_numel targets (host). */
  int (*load_sample)(void* model, int32_t split, int64_t index, void* input, int32_t* target, dscpp_error* err);

  /* Optional (may be NULL): called on rank 0 after evaluation and at the end of training. */
  int (*report)(void* model, const dscpp_infer* infer, dscpp_error* err);

  /* ---- ABI 5 ---- Optional (may be NULL): one layer's decode call (dscpp_decode_ctx), for
   * `dscpp generate`. */
  int (*decode)(void* model, int32_t layer, const dscpp_decode_ctx* ctx, dscpp_error* err);

  /* ---- ABI 9 ---- Optional (may be NULL): the positions of each stream a micro-batch of `batch`
   * samples (host, as load_sample wrote them) needs, written to lengths[0..1] (0: all), so every
   * layer of its passes computes only those (stream_len) — transformers' padding to the longest
   * sample of each batch. */
  int (*batch_lengths)(void* model, const void* inputs, const int32_t* targets, int64_t batch, int64_t* lengths,
                       dscpp_error* err);
} dscpp_model_api;

#define DSCPP_MODEL_ENTRY_SYMBOL "dscpp_model_entry"
typedef const dscpp_model_api* (*dscpp_model_entry_fn)(void);

/* Fills the version and size fields; call it on the api struct that dscpp_model_entry returns. */
static inline void dscpp_model_api_stamp(dscpp_model_api* api) {
  api->abi_version = DSCPP_MODEL_ABI_VERSION;
  api->api_size = (uint32_t)sizeof(dscpp_model_api);
  api->ops_size = (uint32_t)sizeof(dscpp_ops);
  api->layer_ctx_size = (uint32_t)sizeof(dscpp_layer_ctx);
  api->layer_desc_size = (uint32_t)sizeof(dscpp_layer_desc);
  api->param_desc_size = (uint32_t)sizeof(dscpp_param_desc);
  api->host_info_size = (uint32_t)sizeof(dscpp_host_info);
}

#ifdef __cplusplus
}
#endif

#endif /* DSCPP_MODEL_H */
