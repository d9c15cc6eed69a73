// T5's attention (dscpp/seq2seq_layers.h): scores q·kᵀ without a scale, plus a relative position
// bias and the masks, through the table's masked softmax; per sample, one strided batched GEMM
// over the heads for each product. The probabilities are kept (a T5 bias has no fused kernel),
// which at T5's lengths costs less than recomputing them.
#include "dscpp/seq2seq_layers.h"

namespace dscpp::layers {

BiasedAttention::BiasedAttention(Layer& owner, const BiasedAttentionSpec& s, const Env& keys)
    : s_(s), env_(owner.env()), keys_(keys), inner_(s.heads * s.head_dim) {
  const int64_t Tq = env_.context, Tk = keys.context;
  if (s.heads <= 0 || s.head_dim <= 0 || s.hidden <= 0)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + owner.name() + ": an attention needs heads, a head size and a width");
  if (s.cross && (s.causal || s.bias))
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + owner.name() + ": a cross-attention has no causal mask or position bias");
  if (s.causal && Tq > Tk)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + owner.name() + ": causal attention with more queries than keys");
  q_.emplace(owner, s.q, s.hidden, inner_, s.q_init);
  // A cross-attention's keys and values are the memory's rows, per sample and per decoded sequence.
  const int64_t kv_rows = s.cross ? Tk : 0;
  k_.emplace(owner, s.k, s.hidden, inner_, s.kv_init, Name{}, false, "", kv_rows);
  v_.emplace(owner, s.v, s.hidden, inner_, s.kv_init, Name{}, false, "", kv_rows);
  out_.emplace(owner, s.out, inner_, s.hidden, s.out_init);
  // transformers' Trainer exempts it from weight decay by its name ("bias" is in it).
  if (s.bias) {
    table_ = owner.add_param(
        {s.bias->table, {s.bias->num_buckets, s.heads}, s.bias->init, s.bias->tied_to, false, DSCPP_ROLE_BIAS});
    if (Lora* lora = env_.lora) {
      const std::string full = owner.full_name(table_);
      lora->other(full.substr(0, full.rfind('.')), "an embedding (T5's relative position bias)");
    }
  }
  const int64_t e = static_cast<int64_t>(env_.elem), H = s.heads;
  sv_q_ = owner.saved.add(Tq * inner_ * e);
  sv_k_ = owner.saved.add(Tk * inner_ * e);
  sv_v_ = owner.saved.add(Tk * inner_ * e);
  sv_probs_ = owner.saved.add(H * Tq * Tk * e);
  sv_att_ = owner.saved.add(Tq * inner_ * e);
  // The bias is one [H, Tq, Tk] for the whole batch; a per-sample slot is the only size Buffers know.
  if (s.bias) fw_bias_ = owner.fwd_work.add(H * Tq * Tk * e);
  bw_datt_ = owner.bwd_work.add(Tq * inner_ * e);
  bw_dprobs_ = owner.bwd_work.add(H * Tq * Tk * e);
  bw_dq_ = owner.bwd_work.add(Tq * inner_ * e);
  bw_dk_ = owner.bwd_work.add(Tk * inner_ * e);
  bw_dv_ = owner.bwd_work.add(Tk * inner_ * e);
  if (s.bias) bw_dbias_ = owner.bwd_work.add(H * Tq * Tk * e);
  // Decoding: keys and values of every position (self) or of the memory (cross), per sequence.
  dc_k_ = owner.decode_cache.add(Tk * inner_ * e);
  dc_v_ = owner.decode_cache.add(Tk * inner_ * e);
  dw_q_ = owner.decode_work.add(inner_ * e);
  if (!s.cross) {
    dw_k_ = owner.decode_work.add(inner_ * e);
    dw_v_ = owner.decode_work.add(inner_ * e);
  }
  dw_scores_ = owner.decode_work.add(H * Tk * e);
  if (s.bias) dw_bias_ = owner.decode_work.add(H * Tk * e);
  dw_att_ = owner.decode_work.add(inner_ * e);
}

void BiasedAttention::bias(const Call& c, void* out, int64_t Tq, int64_t Tk, int64_t q0) const {
  const RelativeBiasSpec& b = *s_.bias;
  DSCPP_CALL(c.ops(), relative_bias_forward, c.param(table_), out, s_.heads, Tq, Tk, q0, b.bidirectional ? 1 : 0,
             b.num_buckets, b.max_distance);
}

void BiasedAttention::forward(const Call& c, const void* x, const void* memory, KeyLimit keys, const void* residual,
                              void* y) const {
  const int64_t B = c.batch(), Tq = c.positions(env_), Tk = c.positions(keys_);
  const int64_t H = s_.heads, D = s_.head_dim, P = H * Tq * Tk;
  const void* source = s_.cross ? memory : x;
  void* q = c.saved(sv_q_);
  void* k = c.saved(sv_k_);
  void* v = c.saved(sv_v_);
  void* probs = c.saved(sv_probs_);
  void* att = c.saved(sv_att_);
  q_->forward(c, x, q, B * Tq);
  k_->forward(c, source, k, B * Tk);
  v_->forward(c, source, v, B * Tk);
  for (int64_t b = 0; b < B; ++b)
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_TRANS, Tq, Tk, D, 1.0f,
               at(q, b * Tq * inner_, env_), inner_, D, at(k, b * Tk * inner_, env_), inner_, D, 0.0f,
               at(probs, b * P, env_), Tk, Tq * Tk, H);
  void* bias_rows = nullptr;
  if (table_ >= 0) {
    bias_rows = c.fwd_work(fw_bias_);
    bias(c, bias_rows, Tq, Tk, 0);
  }
  DSCPP_CALL(c.ops(), masked_softmax_forward, probs, bias_rows, keys.len, keys.ld, probs, B, H, Tq, Tk,
             s_.causal ? 1 : 0);
  for (int64_t b = 0; b < B; ++b)
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_NO_TRANS, Tq, D, Tk, 1.0f, at(probs, b * P, env_),
               Tk, Tq * Tk, at(v, b * Tk * inner_, env_), inner_, D, 0.0f, at(att, b * Tq * inner_, env_), inner_, D,
               H);
  out_->forward(c, att, y, B * Tq, residual);
}

void BiasedAttention::backward(const Call& c, const void* dy, const void* x, const void* memory, KeyLimit,
                               void* dx, void* dmemory) const {
  const int64_t B = c.batch(), Tq = c.positions(env_), Tk = c.positions(keys_);
  const int64_t H = s_.heads, D = s_.head_dim, P = H * Tq * Tk;
  const void* q = c.saved(sv_q_);
  const void* k = c.saved(sv_k_);
  const void* v = c.saved(sv_v_);
  const void* probs = c.saved(sv_probs_);
  void* datt = c.bwd_work(bw_datt_);
  void* ds = c.bwd_work(bw_dprobs_);
  void* dq = c.bwd_work(bw_dq_);
  void* dk = c.bwd_work(bw_dk_);
  void* dv = c.bwd_work(bw_dv_);
  out_->backward(c, dy, s_.hidden, c.saved(sv_att_), datt, false, B * Tq);
  for (int64_t b = 0; b < B; ++b) {
    const void* datt_b = at(datt, b * Tq * inner_, env_);
    // dprobs = datt·vᵀ;  dv = probsᵀ·datt
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_TRANS, Tq, Tk, D, 1.0f, datt_b, inner_, D,
               at(v, b * Tk * inner_, env_), inner_, D, 0.0f, at(ds, b * P, env_), Tk, Tq * Tk, H);
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_TRANS, DSCPP_NO_TRANS, Tk, D, Tq, 1.0f, at(probs, b * P, env_), Tk,
               Tq * Tk, datt_b, inner_, D, 0.0f, at(dv, b * Tk * inner_, env_), inner_, D, H);
  }
  // Masked entries have probability 0, so their score gradient is 0 too.
  DSCPP_CALL(c.ops(), softmax_backward, probs, ds, ds, B * H * Tq, Tk);
  if (table_ >= 0 && c.grad(table_) != nullptr) {
    void* dbias = c.bwd_work(bw_dbias_);
    DSCPP_CALL(c.ops(), fill, dbias, 0.0f, P);
    DSCPP_CALL(c.ops(), bias_grad, ds, dbias, B, P);
    const RelativeBiasSpec& rb = *s_.bias;
    DSCPP_CALL(c.ops(), relative_bias_backward, dbias, c.grad(table_), H, Tq, Tk, int64_t{0}, rb.bidirectional ? 1 : 0,
               rb.num_buckets, rb.max_distance);
  }
  for (int64_t b = 0; b < B; ++b) {
    const void* ds_b = at(ds, b * P, env_);
    // dq = dscores·k;  dk = dscoresᵀ·q
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_NO_TRANS, Tq, D, Tk, 1.0f, ds_b, Tk, Tq * Tk,
               at(k, b * Tk * inner_, env_), inner_, D, 0.0f, at(dq, b * Tq * inner_, env_), inner_, D, H);
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_TRANS, DSCPP_NO_TRANS, Tk, D, Tq, 1.0f, ds_b, Tk, Tq * Tk,
               at(q, b * Tq * inner_, env_), inner_, D, 0.0f, at(dk, b * Tk * inner_, env_), inner_, D, H);
  }
  q_->backward(c, dq, inner_, x, dx, false, B * Tq);
  if (s_.cross) {
    k_->backward(c, dk, inner_, memory, dmemory, true, B * Tk);
    v_->backward(c, dv, inner_, memory, dmemory, true, B * Tk);
  } else {
    k_->backward(c, dk, inner_, x, dx, true, B * Tq);
    v_->backward(c, dv, inner_, x, dx, true, B * Tq);
  }
}

void BiasedAttention::decode(const DecodeCall& d, const void* x, const void* residual, void* y) const {
  const Call c = d.call();
  const int64_t n = d.batch(), H = s_.heads, D = s_.head_dim, p = d.ctx.position;
  void* q = d.work(dw_q_);
  q_->forward(c, x, q, n);
  int64_t len = keys_.context;
  KeyLimit keys;
  if (s_.cross) {
    if (d.ctx.memory == nullptr || d.ctx.memory_len < 1 || d.ctx.memory_len > keys_.context)
      fail(DSCPP_E_INVALID_ARGUMENT, "layer " + c.layer.name() + ": decoding needs the encoder's output of 1 to " +
                                         std::to_string(keys_.context) + " positions per sequence");
    len = d.ctx.memory_len;
    // The memory's keys and values are the same at every position: made once, at the first.
    if (p == 0)
      for (int64_t i = 0; i < n; ++i) {
        const void* m = at(d.ctx.memory, i * len * s_.hidden, env_);
        k_->forward(c, m, d.cache(dc_k_, i), len);
        v_->forward(c, m, d.cache(dc_v_, i), len);
      }
    keys.len = d.ctx.memory_valid;
  } else {
    if (p < 0 || p >= keys_.context)
      fail(DSCPP_E_INVALID_ARGUMENT, "layer " + c.layer.name() + ": position " + std::to_string(p) +
                                         " is outside its cache of " + std::to_string(keys_.context) + " positions");
    void* k = d.work(dw_k_);
    void* v = d.work(dw_v_);
    k_->forward(c, x, k, n);
    v_->forward(c, x, v, n);
    for (int64_t i = 0; i < n; ++i) {
      DSCPP_CALL(c.ops(), copy_2d, at(k, i * inner_, env_), inner_, at(d.cache(dc_k_, i), p * inner_, env_), inner_,
                 int64_t{1}, inner_, 0);
      DSCPP_CALL(c.ops(), copy_2d, at(v, i * inner_, env_), inner_, at(d.cache(dc_v_, i), p * inner_, env_), inner_,
                 int64_t{1}, inner_, 0);
    }
    len = p + 1;
  }
  void* scores = d.work(dw_scores_);  // n × H × len
  for (int64_t i = 0; i < n; ++i)
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_TRANS, int64_t{1}, len, D, 1.0f,
               at(q, i * inner_, env_), inner_, D, d.cache(dc_k_, i), inner_, D, 0.0f, at(scores, i * H * len, env_),
               len, len, H);
  void* bias_row = nullptr;
  if (table_ >= 0) {
    bias_row = d.work(dw_bias_);
    bias(c, bias_row, 1, len, p);
  }
  DSCPP_CALL(c.ops(), masked_softmax_forward, scores, bias_row, keys.len, keys.ld, scores, n, H, int64_t{1}, len, 0);
  void* att = d.work(dw_att_);
  for (int64_t i = 0; i < n; ++i)
    DSCPP_CALL(c.ops(), gemm_strided_batched, DSCPP_NO_TRANS, DSCPP_NO_TRANS, int64_t{1}, D, len, 1.0f,
               at(scores, i * H * len, env_), len, len, d.cache(dc_v_, i), inner_, D, 0.0f, at(att, i * inner_, env_),
               inner_, D, H);
  out_->forward(c, att, y, n, residual);
}

}  // namespace dscpp::layers
