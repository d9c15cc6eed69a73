// The parts layers are made of (dscpp/layers.h): norms, attention and MLPs (the linear maps are
// linear.cpp's), each declaring its parameters and buffers on its layer and computing only through
// the ops table.
#include "dscpp/layers.h"

#include <algorithm>
#include <cmath>

namespace dscpp::layers {
namespace {

int64_t rows_of(const Call& c, const Env& env) {
  return c.batch() * c.positions(env);
}

}  // namespace

// ---- Norm -------------------------------------------------------------------------------------

Norm::Norm(Layer& owner, NormKind k, const Name& w, const Name& b, int64_t d, float e, Init weight_init)
    : kind(k), dim(d), eps(e) {
  weight = owner.add_param({w, {dim}, weight_init, "", false, DSCPP_ROLE_NORM});
  if (kind == NormKind::layer) {
    if (b.empty()) fail(DSCPP_E_INTERNAL, "layer " + owner.name() + ": a LayerNorm needs a bias name");
    bias = owner.add_param({b, {dim}, zeros(), "", false, DSCPP_ROLE_NORM});
  }
  bw_frozen_ = owner.bwd_work.add((bias >= 0 ? 2 : 1) * dim * static_cast<int64_t>(owner.env().elem));
}

void Norm::forward(const Call& c, const void* x, void* y, float* stats, int64_t rows) const {
  if (kind == NormKind::rms)
    DSCPP_CALL(c.ops(), rmsnorm_forward, x, c.param(weight), y, stats, rows, dim, eps);
  else
    DSCPP_CALL(c.ops(), layernorm_forward, x, c.param(weight), c.param(bias), y, stats, stats + rows, rows, dim, eps);
}

void Norm::backward(const Call& c, const void* dy, const void* x, const float* stats, void* dx, int64_t rows) const {
  void* dgamma = c.grad(weight);
  void* dbeta = bias >= 0 ? c.grad(bias) : nullptr;
  // The kernels make the weight (and bias) gradient with dx and take no null: a frozen one's goes
  // to scratch, zeroed so that what is added there stays finite.
  if (dgamma == nullptr || (bias >= 0 && dbeta == nullptr)) {
    void* scratch = c.bwd_work(bw_frozen_);
    DSCPP_CALL(c.ops(), fill, scratch, 0.0f, (bias >= 0 ? 2 : 1) * dim);
    if (dgamma == nullptr) dgamma = scratch;
    if (bias >= 0 && dbeta == nullptr) dbeta = at(scratch, dim, c.layer.env());
  }
  if (kind == NormKind::rms)
    DSCPP_CALL(c.ops(), rmsnorm_backward, dy, x, c.param(weight), stats, dx, dgamma, rows, dim);
  else
    DSCPP_CALL(c.ops(), layernorm_backward, dy, x, c.param(weight), stats, stats + rows, dx, dgamma, dbeta, rows, dim);
}

// ---- Attention --------------------------------------------------------------------------------

Attention::Attention(Layer& owner, const AttentionSpec& s)
    : s_(s), env_(owner.env()), width_((s.heads + 2 * s.kv_heads) * s.head_dim) {
  if (s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 || s.heads % s.kv_heads != 0)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + owner.name() + ": " + std::to_string(s.heads) +
                                       " query heads cannot share " + std::to_string(s.kv_heads) +
                                       " key/value heads (it must divide them)");
  // Training reads each query's first key from the data input, where the model's data put it.
  if (s.window < 0 || (s.window > 0 && s.window < env_.context && !env_.documents))
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + owner.name() + ": a sliding window of " + std::to_string(s.window) +
                                       " tokens needs samples that carry each token's first key (Env::documents)");
  if (s.fused_qkv) {
    qkv_.emplace(owner, s.qkv, s.hidden, width_, s.init, s.qkv_bias, s.file_transposed);
  } else {
    const int64_t kv = s.kv_heads * s.head_dim;
    q_.emplace(owner, s.q, s.hidden, s.heads * s.head_dim, s.init, s.q_bias, s.file_transposed);
    k_.emplace(owner, s.k, s.hidden, kv, s.init, s.k_bias, s.file_transposed);
    v_.emplace(owner, s.v, s.hidden, kv, s.init, s.v_bias, s.file_transposed);
  }
  out_.emplace(owner, s.out, s.heads * s.head_dim, s.hidden, s.out_init, s.out_bias, s.file_transposed);
  const int64_t T = env_.context, e = static_cast<int64_t>(env_.elem), Q = s.heads * s.head_dim;
  sv_qkv_ = owner.saved.add(T * width_ * e);  // after the rotary embedding
  sv_lse_ = owner.saved.add(s.heads * T * 4);
  sv_att_ = owner.saved.add(T * Q * e);
  const bool grouped = s.kv_heads != s.heads;
  if (grouped) fw_qkv3_ = owner.fwd_work.add(3 * T * Q * e);
  if (!s.fused_qkv) fw_ones_ = owner.fwd_work.add(T * e);
  bw_datt_ = owner.bwd_work.add(T * Q * e);
  bw_dqkv_ = owner.bwd_work.add(T * width_ * e);
  bw_scratch_ = owner.bwd_work.add(s.heads * T * 4);
  if (grouped) {
    bw_qkv3_ = owner.bwd_work.add(3 * T * Q * e);
    bw_dqkv3_ = owner.bwd_work.add(3 * T * Q * e);
  }
  if (!s.fused_qkv) bw_ones_ = owner.bwd_work.add(T * e);
  const int64_t kv = s.kv_heads * s.head_dim;
  dc_k_ = owner.decode_cache.add(T * kv * e);  // every position's keys, after the rotary embedding
  dc_v_ = owner.decode_cache.add(T * kv * e);
  dw_qkv_ = owner.decode_work.add(width_ * e);
  if (!s.fused_qkv) dw_ones_ = owner.decode_work.add(e);
  dw_scores_ = owner.decode_work.add(s.heads * T * e);
  dw_att_ = owner.decode_work.add(Q * e);
}

void Attention::decode(const DecodeCall& d, const void* x, const void* residual, void* y) const {
  const Call c = d.call();
  const int64_t n = d.batch(), D = s_.head_dim, Q = s_.heads * D, kv = s_.kv_heads * D, G = s_.heads / s_.kv_heads;
  const int64_t p = d.ctx.position, first = s_.window > 0 ? std::max<int64_t>(0, p - s_.window + 1) : 0;
  const int64_t len = p + 1 - first;
  if (p < 0 || p >= env_.context)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + c.layer.name() + ": position " + std::to_string(p) +
                                       " is outside its cache of " + std::to_string(env_.context) + " positions");
  void* qkv = d.work(dw_qkv_);  // n rows of [q | k | v]
  if (qkv_) {
    qkv_->forward(c, x, qkv, n);
  } else {
    void* ones = d.work(dw_ones_);
    DSCPP_CALL(c.ops(), fill, ones, 1.0f, n);
    q_->forward_strided(c, x, qkv, width_, n, ones);
    k_->forward_strided(c, x, at(qkv, Q, env_), width_, n, ones);
    v_->forward_strided(c, x, at(qkv, Q + kv, env_), width_, n, ones);
  }
  if (s_.rope)
    DSCPP_CALL(c.ops(), rope_forward, qkv, n, int64_t{1}, width_, s_.heads + s_.kv_heads, D, nullptr, p, &*s_.rope);
  for (int64_t i = 0; i < n; ++i) {
    const void* row = at(qkv, i * width_, env_);
    DSCPP_CALL(c.ops(), copy_2d, at(row, Q, env_), kv, at(d.cache(dc_k_, i), p * kv, env_), kv, int64_t{1}, kv, 0);
    DSCPP_CALL(c.ops(), copy_2d, at(row, Q + kv, env_), kv, at(d.cache(dc_v_, i), p * kv, env_), kv, int64_t{1}, kv, 0);
  }
  // The keys and values are in the caches: scaling every row scales the queries.
  DSCPP_CALL(c.ops(), scale, 1.0f / std::sqrt(static_cast<float>(D)), qkv, n * width_);
  // Per sequence and kv head j, its G query heads against its keys: scores [G × len] = (q/√D)·Kⱼᵀ
  // over the positions the query sees (first … p); the cache's rows are positions of kv·D
  // elements, head j at column j·D.
  void* scores = d.work(dw_scores_);  // n × heads × len
  for (int64_t i = 0; i < n; ++i)
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_TRANS, G, len, D, 1.0f, at(qkv, i * width_, env_),
               D, G * D, at(d.cache(dc_k_, i), first * kv, env_), kv, D, 0.0f, at(scores, i * s_.heads * len, env_),
               len, G * len, s_.kv_heads);
  DSCPP_CALL(c.ops(), softmax_forward, scores, scores, n * s_.heads, len);
  void* att = d.work(dw_att_);  // n × Q
  for (int64_t i = 0; i < n; ++i)
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_NO_TRANS, G, D, len, 1.0f,
               at(scores, i * s_.heads * len, env_), len, G * len, at(d.cache(dc_v_, i), first * kv, env_), kv, D, 0.0f,
               at(att, i * Q, env_), D, G * D, s_.kv_heads);
  out_->forward(c, att, y, n, residual);
}

// [q | k (kv heads) | v (kv heads)] → [q | k | v] with every kv head repeated for its group.
void Attention::expand(const Call& c, const void* qkv, void* qkv3) const {
  const int64_t rows = rows_of(c, env_), D = s_.head_dim, Q = s_.heads * D, G = s_.heads / s_.kv_heads;
  DSCPP_CALL(c.ops(), copy_2d, qkv, width_, qkv3, 3 * Q, rows, Q, 0);
  for (int64_t part = 1; part <= 2; ++part)
    for (int64_t j = 0; j < s_.kv_heads; ++j)
      for (int64_t g = 0; g < G; ++g)
        DSCPP_CALL(c.ops(), copy_2d, at(qkv, Q + (part - 1) * s_.kv_heads * D + j * D, env_), width_,
                   at(qkv3, part * Q + (j * G + g) * D, env_), 3 * Q, rows, D, 0);
}

// The transpose of expand: each kv head's gradient is the sum over its group's copies.
void Attention::reduce(const Call& c, const void* dqkv3, void* dqkv) const {
  const int64_t rows = rows_of(c, env_), D = s_.head_dim, Q = s_.heads * D, G = s_.heads / s_.kv_heads;
  DSCPP_CALL(c.ops(), copy_2d, dqkv3, 3 * Q, dqkv, width_, rows, Q, 0);
  for (int64_t part = 1; part <= 2; ++part)
    for (int64_t j = 0; j < s_.kv_heads; ++j)
      for (int64_t g = 0; g < G; ++g)
        DSCPP_CALL(c.ops(), copy_2d, at(dqkv3, part * Q + (j * G + g) * D, env_), 3 * Q,
                   at(dqkv, Q + (part - 1) * s_.kv_heads * D + j * D, env_), width_, rows, D, g == 0 ? 0 : 1);
}

// RoPE on q and k of every token (backward: their gradients), at positions 0 … T−1 or, with
// packed documents, at each token's position in its document (one call per sample: samples'
// positions are Env::sample_ints() apart in the data input).
void Attention::rotate(const Call& c, void* x, bool backward) const {
  const int64_t B = c.batch(), T = env_.context, D = s_.head_dim, heads = s_.heads + s_.kv_heads;
  auto rope = [&](void* rows, int64_t batch, const int32_t* positions) {
    if (backward)
      DSCPP_CALL(c.ops(), rope_backward, rows, batch, T, width_, heads, D, positions, int64_t{0}, &*s_.rope);
    else
      DSCPP_CALL(c.ops(), rope_forward, rows, batch, T, width_, heads, D, positions, int64_t{0}, &*s_.rope);
  };
  if (!env_.documents) return rope(x, B, nullptr);
  const int32_t* pos = c.tokens(TokenPart::positions);
  for (int64_t b = 0; b < B; ++b) rope(at(x, b * T * width_, env_), 1, pos + b * env_.sample_ints());
}

// Each query's first visible key with packed documents; null (causal) otherwise.
const int32_t* Attention::first_keys(const Call& c) const {
  return env_.documents ? c.tokens(TokenPart::first_key) : nullptr;
}

void Attention::forward(const Call& c, const void* x, const void* residual, void* y) const {
  const int64_t rows = rows_of(c, env_), B = c.batch(), T = env_.context, D = s_.head_dim, Q = s_.heads * D;
  const int64_t kv = s_.kv_heads * D;
  void* qkv = c.saved(sv_qkv_);
  if (qkv_) {
    qkv_->forward(c, x, qkv, rows);
  } else {
    void* ones = c.fwd_work(fw_ones_);
    DSCPP_CALL(c.ops(), fill, ones, 1.0f, rows);
    q_->forward_strided(c, x, qkv, width_, rows, ones);
    k_->forward_strided(c, x, at(qkv, Q, env_), width_, rows, ones);
    v_->forward_strided(c, x, at(qkv, Q + kv, env_), width_, rows, ones);
  }
  if (s_.rope) rotate(c, qkv, false);
  const void* packed = qkv;
  if (fw_qkv3_ >= 0) {
    expand(c, qkv, c.fwd_work(fw_qkv3_));
    packed = c.fwd_work(fw_qkv3_);
  }
  void* att = c.saved(sv_att_);
  DSCPP_CALL(c.ops(), flash_attention_masked_forward, packed, first_keys(c), env_.sample_ints(),
             static_cast<float*>(c.saved(sv_lse_)), att, B, T, s_.heads, D, 1.0f / std::sqrt(static_cast<float>(D)));
  out_->forward(c, att, y, rows, residual);
}

void Attention::backward(const Call& c, const void* dy, const void* x, void* dx) const {
  const int64_t rows = rows_of(c, env_), B = c.batch(), T = env_.context, D = s_.head_dim, Q = s_.heads * D;
  const int64_t kv = s_.kv_heads * D;
  void* datt = c.bwd_work(bw_datt_);
  out_->backward(c, dy, s_.hidden, c.saved(sv_att_), datt, false, rows);
  const void* qkv = c.saved(sv_qkv_);
  void* dqkv = c.bwd_work(bw_dqkv_);
  const void* packed = qkv;
  void* dpacked = dqkv;
  if (bw_qkv3_ >= 0) {
    expand(c, qkv, c.bwd_work(bw_qkv3_));
    packed = c.bwd_work(bw_qkv3_);
    dpacked = c.bwd_work(bw_dqkv3_);
  }
  DSCPP_CALL(c.ops(), flash_attention_masked_backward, packed, first_keys(c), env_.sample_ints(), c.saved(sv_att_),
             static_cast<const float*>(c.saved(sv_lse_)), datt, dpacked, static_cast<float*>(c.bwd_work(bw_scratch_)),
             B, T, s_.heads, D, 1.0f / std::sqrt(static_cast<float>(D)));
  if (bw_qkv3_ >= 0) reduce(c, dpacked, dqkv);
  if (s_.rope) rotate(c, dqkv, true);
  if (qkv_) {
    qkv_->backward(c, dqkv, width_, x, dx, false, rows);
  } else {
    void* ones = c.bwd_work(bw_ones_);
    DSCPP_CALL(c.ops(), fill, ones, 1.0f, rows);
    q_->backward(c, dqkv, width_, x, dx, false, rows, ones);
    k_->backward(c, at(dqkv, Q, env_), width_, x, dx, true, rows, ones);
    v_->backward(c, at(dqkv, Q + kv, env_), width_, x, dx, true, rows, ones);
  }
}

// ---- Mlp --------------------------------------------------------------------------------------

Mlp::Mlp(Layer& owner, const MlpSpec& s) : s_(s), env_(owner.env()) {
  if ((s.gated && s.act == Activation::relu) || (!s.gated && s.act == Activation::silu))
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + owner.name() + (s.gated ? ": a gated MLP takes SiLU or GELU"
                                                                      : ": an ungated MLP takes GELU or ReLU"));
  if (s.gated) {
    gate_.emplace(owner, s.gate, s.hidden, s.inner, s.init, Name{}, s.file_transposed);
    up_.emplace(owner, s.up, s.hidden, s.inner, s.init, Name{}, s.file_transposed);
    down_.emplace(owner, s.down, s.inner, s.hidden, s.out_init, Name{}, s.file_transposed);
  } else {
    fc_.emplace(owner, s.fc, s.hidden, s.inner, s.init, s.fc_bias, s.file_transposed);
    down_.emplace(owner, s.proj, s.inner, s.hidden, s.out_init, s.proj_bias, s.file_transposed);
  }
  const int64_t TI = env_.context * s.inner * static_cast<int64_t>(env_.elem);
  sv_a_ = owner.saved.add(TI);
  if (s.gated) sv_b_ = owner.saved.add(TI);
  fw_act_ = owner.fwd_work.add(TI);
  bw_act_ = owner.bwd_work.add(TI);
  bw_dact_ = owner.bwd_work.add(TI);
  if (s.gated && s.act != Activation::silu) bw_tmp_ = owner.bwd_work.add(TI);
  const int64_t I = s.inner * static_cast<int64_t>(env_.elem);
  dw_a_ = owner.decode_work.add(I);
  dw_b_ = owner.decode_work.add(I);
  dw_act_ = owner.decode_work.add(I);
}

// act = act(a) ⊙ b (gated) or act(a); a is the pre-activation (the GELU's is written by the fused
// linear, so this only finishes the other forms).
void Mlp::activate(const Call& c, const void* a, const void* b, void* act, int64_t rows) const {
  const int64_t n = rows * s_.inner;
  if (s_.gated && s_.act == Activation::silu) {
    DSCPP_CALL(c.ops(), swiglu_forward, a, b, act, n);
  } else if (s_.gated) {
    DSCPP_CALL(c.ops(), gelu_forward, a, act, n);
    DSCPP_CALL(c.ops(), mul, act, b, act, n);
  } else if (s_.act == Activation::relu) {
    DSCPP_CALL(c.ops(), relu_forward, a, act, n);
  }
}

void Mlp::decode(const DecodeCall& d, const void* x, const void* residual, void* y) const {
  const Call c = d.call();
  const int64_t rows = d.batch();
  void* a = d.work(dw_a_);
  void* act = d.work(dw_act_);
  if (s_.gated) {
    gate_->forward(c, x, a, rows);
    up_->forward(c, x, d.work(dw_b_), rows);
  } else {
    fc_->forward(c, x, a, rows, nullptr, s_.act == Activation::gelu_tanh ? act : nullptr);
  }
  activate(c, a, d.work(dw_b_), act, rows);
  down_->forward(c, act, y, rows, residual);
}

void Mlp::forward(const Call& c, const void* x, const void* residual, void* y) const {
  const int64_t rows = rows_of(c, env_);
  void* act = c.fwd_work(fw_act_);
  if (s_.gated) {
    gate_->forward(c, x, c.saved(sv_a_), rows);
    up_->forward(c, x, c.saved(sv_b_), rows);
  } else {
    fc_->forward(c, x, c.saved(sv_a_), rows, nullptr, s_.act == Activation::gelu_tanh ? act : nullptr);
  }
  activate(c, c.saved(sv_a_), s_.gated ? c.saved(sv_b_) : nullptr, act, rows);
  down_->forward(c, act, y, rows, residual);
}

void Mlp::backward(const Call& c, const void* dy, const void* x, void* dx) const {
  const int64_t rows = rows_of(c, env_), n = rows * s_.inner;
  void* act = c.bwd_work(bw_act_);
  void* dact = c.bwd_work(bw_dact_);
  if (s_.gated) {
    void* gate = c.saved(sv_a_);
    void* up = c.saved(sv_b_);
    activate(c, gate, up, act, rows);
    down_->backward(c, dy, s_.hidden, act, dact, false, rows);
    // The gradients overwrite gate and up: backward is their last reader.
    if (s_.act == Activation::silu) {
      DSCPP_CALL(c.ops(), swiglu_backward, gate, up, dact, gate, up, n);
    } else {
      // d up = dact ⊙ gelu(gate); d gate = gelu'(gate) ⊙ dact ⊙ up.
      void* tmp = c.bwd_work(bw_tmp_);
      DSCPP_CALL(c.ops(), mul, dact, up, tmp, n);
      DSCPP_CALL(c.ops(), gelu_forward, gate, act, n);
      DSCPP_CALL(c.ops(), mul, dact, act, up, n);
      DSCPP_CALL(c.ops(), gelu_backward, gate, tmp, gate, n);
    }
    gate_->backward(c, gate, s_.inner, x, dx, false, rows);
    up_->backward(c, up, s_.inner, x, dx, true, rows);
  } else if (s_.act == Activation::relu) {
    void* pre = c.saved(sv_a_);
    DSCPP_CALL(c.ops(), relu_forward, pre, act, n);
    down_->backward(c, dy, s_.hidden, act, dact, false, rows);
    DSCPP_CALL(c.ops(), relu_backward, pre, dact, dact, n);
    fc_->backward(c, dact, s_.inner, x, dx, false, rows);
  } else {
    const void* pre = c.saved(sv_a_);
    DSCPP_CALL(c.ops(), gelu_forward, pre, act, n);
    // dact is the gradient of the GELU's input (the backward takes it through the GELU).
    down_->backward(c, dy, s_.hidden, act, dact, false, rows, nullptr, pre);
    fc_->backward(c, dact, s_.inner, x, dx, false, rows);
  }
}

}  // namespace dscpp::layers
