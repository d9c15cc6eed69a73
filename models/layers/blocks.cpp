// The layers a causal language model is made of (dscpp/layers.h): token embedding, pre-norm
// decoder block, and the loss head.
#include "dscpp/layers.h"

namespace dscpp::layers {

// ---- TokenEmbedding -----------------------------------------------------------------------------

TokenEmbedding::TokenEmbedding(const Env& env, std::string name, int64_t v, int64_t h, const Name& t, Init init,
                               const Name& p, int64_t max_positions)
    : Layer(env, std::move(name), env.context * h), vocab(v), hidden(h), max_positions(max_positions) {
  table = add_param({t, {vocab, hidden}, init, "", false, DSCPP_ROLE_EMBEDDING});
  decode_output_numel = hidden;
  if (p.empty()) return;
  if (max_positions < env.context)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + this->name() + ": a context of " + std::to_string(env.context) +
                                       " tokens needs at least as many positions, not " +
                                       std::to_string(max_positions));
  positions = add_param({p, {max_positions, hidden}, init, "", false, DSCPP_ROLE_EMBEDDING});
  if (env.documents) fw_positions_ = fwd_work.add(env.context * h * static_cast<int64_t>(env.elem));
}

void TokenEmbedding::forward(const Call& c) {
  const int64_t B = c.batch(), T = env().context, S = env().sample_ints();
  const int32_t* ids = c.tokens(TokenPart::ids);
  if (!env().documents) {
    DSCPP_CALL(c.ops(), embedding_forward, ids, c.param(table), c.ctx.output, B * T, vocab, hidden);
    // Learned positions act as a bias of length T·hidden over the batch's B rows.
    if (positions >= 0) DSCPP_CALL(c.ops(), bias_add, c.ctx.output, c.param(positions), B, T * hidden);
    return;
  }
  // Samples are S ints apart: one lookup per sample, and the positions' rows looked up likewise.
  for (int64_t b = 0; b < B; ++b)
    DSCPP_CALL(c.ops(), embedding_forward, ids + b * S, c.param(table), at(c.ctx.output, b * T * hidden, env()), T,
               vocab, hidden);
  if (positions < 0) return;
  void* rows = c.fwd_work(fw_positions_);
  const int32_t* pos = c.tokens(TokenPart::positions);
  for (int64_t b = 0; b < B; ++b)
    DSCPP_CALL(c.ops(), embedding_forward, pos + b * S, c.param(positions), at(rows, b * T * hidden, env()), T,
               max_positions, hidden);
  DSCPP_CALL(c.ops(), add, c.ctx.output, rows, c.ctx.output, B * T * hidden);
}

void TokenEmbedding::decode(const DecodeCall& d) {
  const Call c = d.call();
  const int64_t n = d.batch();
  const auto* id = static_cast<const int32_t*>(d.ctx.input);
  DSCPP_CALL(c.ops(), embedding_forward, id, c.param(table), d.ctx.output, n, vocab, hidden);
  if (positions < 0) return;
  if (d.ctx.position < 0 || d.ctx.position >= max_positions)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + name() + ": position " + std::to_string(d.ctx.position) +
                                       " has no learned embedding (there are " + std::to_string(max_positions) + ")");
  // Every sequence is at the same position: its embedding is added to each row.
  DSCPP_CALL(c.ops(), bias_add, d.ctx.output, at(c.param(positions), d.ctx.position * hidden, env()), n, hidden);
}

void TokenEmbedding::backward(const Call& c) {
  const int64_t B = c.batch(), T = env().context, S = env().sample_ints();
  const int32_t* ids = c.tokens(TokenPart::ids);
  void* dtable = c.grad(table);  // null when frozen, as the positions' may be
  void* dpositions = positions >= 0 ? c.grad(positions) : nullptr;
  if (!env().documents) {
    if (dtable != nullptr)
      DSCPP_CALL(c.ops(), embedding_backward, ids, c.ctx.grad_output, dtable, B * T, vocab, hidden);
    if (dpositions != nullptr) DSCPP_CALL(c.ops(), bias_grad, c.ctx.grad_output, dpositions, B, T * hidden);
    return;
  }
  const int32_t* pos = dpositions != nullptr ? c.tokens(TokenPart::positions) : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const void* dy = at(c.ctx.grad_output, b * T * hidden, env());
    if (dtable != nullptr) DSCPP_CALL(c.ops(), embedding_backward, ids + b * S, dy, dtable, T, vocab, hidden);
    if (pos != nullptr) DSCPP_CALL(c.ops(), embedding_backward, pos + b * S, dy, dpositions, T, max_positions, hidden);
  }
}

// ---- DecoderBlock -------------------------------------------------------------------------------

DecoderBlock::DecoderBlock(const Env& env, std::string name, const BlockSpec& s)
    : Layer(env, std::move(name), env.context * s.attention.hidden),
      hidden_(s.attention.hidden),
      norm1_(*this, s.norm, s.norm1, s.norm1_bias, hidden_, s.eps),
      attn_(*this, s.attention),
      norm2_(*this, s.norm, s.norm2, s.norm2_bias, hidden_, s.eps),
      mlp_(*this, s.mlp) {
  const int64_t T = env.context, TC = T * hidden_ * static_cast<int64_t>(env.elem);
  sv_stats1_ = saved.add(norm1_.stats_floats(T) * 4);
  sv_h_ = saved.add(TC);
  sv_stats2_ = saved.add(norm2_.stats_floats(T) * 4);
  fw_xn_ = fwd_work.add(TC);
  bw_xn_ = bwd_work.add(TC);
  bw_dxn_ = bwd_work.add(TC);
  bw_dh_ = bwd_work.add(TC);
  const int64_t C = hidden_ * static_cast<int64_t>(env.elem);
  dw_xn_ = decode_work.add(C);
  dw_h_ = decode_work.add(C);
  dw_stats_ = decode_work.add(2 * 4);
  decode_output_numel = hidden_;
}

void DecoderBlock::decode(const DecodeCall& d) {
  const Call c = d.call();
  const int64_t n = d.batch();
  void* xn = d.work(dw_xn_);
  void* h = d.work(dw_h_);
  auto* stats = static_cast<float*>(d.work(dw_stats_));
  norm1_.forward(c, d.ctx.input, xn, stats, n);
  attn_.decode(d, xn, d.ctx.input, h);
  norm2_.forward(c, h, xn, stats, n);
  mlp_.decode(d, xn, h, d.ctx.output);
}

// The norm outputs are not kept: backward makes them again from the same inputs (the same bits),
// which costs a norm pass and saves two T×C tensors per sample.
void DecoderBlock::forward(const Call& c) {
  const int64_t rows = c.batch() * env().context;
  void* xn = c.fwd_work(fw_xn_);
  void* h = c.saved(sv_h_);
  norm1_.forward(c, c.ctx.input, xn, static_cast<float*>(c.saved(sv_stats1_)), rows);
  attn_.forward(c, xn, c.ctx.input, h);
  norm2_.forward(c, h, xn, static_cast<float*>(c.saved(sv_stats2_)), rows);
  mlp_.forward(c, xn, h, c.ctx.output);
}

void DecoderBlock::backward(const Call& c) {
  const int64_t rows = c.batch() * env().context;
  const void* h = c.saved(sv_h_);
  auto* stats1 = static_cast<float*>(c.saved(sv_stats1_));
  void* xn = c.bwd_work(bw_xn_);
  void* dxn = c.bwd_work(bw_dxn_);
  void* dh = c.bwd_work(bw_dh_);
  auto mlp = [&](const void* dy, const void* in, void* dx) { mlp_.backward(c, dy, in, dx); };
  auto attention = [&](const void* dy, const void* in, void* dx) { attn_.backward(c, dy, in, dx); };
  residual_backward(c, norm2_, h, static_cast<float*>(c.saved(sv_stats2_)), c.ctx.grad_output, xn, dxn, dh, rows, mlp);
  if (c.ctx.grad_input != nullptr) {
    residual_backward(c, norm1_, c.ctx.input, stats1, dh, xn, dxn, c.ctx.grad_input, rows, attention);
    return;
  }
  // The first layer: only the norm's own gradients.
  norm1_.forward(c, c.ctx.input, xn, stats1, rows);
  attention(dh, xn, dxn);
  norm1_.backward(c, dxn, c.ctx.input, stats1, dxn, rows);
}

// ---- LmHead -------------------------------------------------------------------------------------

LmHead::LmHead(const Env& env, std::string name, int64_t hidden, int64_t vocab, NormKind norm, float eps,
               const Name& norm_weight, const Name& norm_bias, const Name& weight, Init init,
               const std::string& tied_to, const HeadInput& input)
    : Layer(env, std::move(name), env.context * vocab),
      hidden_(hidden),
      vocab_(vocab),
      in_(input),
      norm_(*this, norm, norm_weight, norm_bias, hidden, eps, input.norm_init),
      proj_(*this, weight, hidden, vocab, init, {}, false, tied_to) {
  const int64_t T = env.context, TC = T * hidden * static_cast<int64_t>(env.elem);
  sv_stats_ = saved.add(norm_.stats_floats(T) * 4);
  fw_xn_ = fwd_work.add(TC);
  bw_xn_ = bwd_work.add(TC);
  bw_dxn_ = bwd_work.add(TC);
  dw_xn_ = decode_work.add(hidden * static_cast<int64_t>(env.elem));
  dw_stats_ = decode_work.add(2 * 4);
  decode_output_numel = vocab;
}

void LmHead::decode(const DecodeCall& d) {
  const Call c = d.call();
  const int64_t rows = d.batch();
  void* xn = d.work(dw_xn_);
  norm_.forward(c, d.ctx.input, xn, static_cast<float*>(d.work(dw_stats_)), rows);
  if (in_.scale != 1.0f) DSCPP_CALL(c.ops(), scale, in_.scale, xn, rows * hidden_);
  proj_.forward(c, xn, d.ctx.output, rows);
}

int64_t LmHead::memory_rows(const Call& c) const {
  return in_.memory ? c.batch() * c.positions(*in_.memory) : 0;
}

const void* LmHead::positions(const Call& c) const {
  return at(c.ctx.input, memory_rows(c) * hidden_, env());
}

// The targets are [batch × context] whatever positions the micro-batch uses: with fewer, each
// sample's rows take their first targets.
template <class Rows>
void LmHead::per_sample(const Call& c, Rows&& rows) const {
  const int64_t T = c.positions(env()), B = c.batch();
  if (T == env().context) return rows(int64_t{0}, c.ctx.target, B * T);
  for (int64_t b = 0; b < B; ++b) rows(b * T, c.ctx.target + b * env().context, T);
}

void LmHead::forward(const Call& c) {
  const int64_t rows = c.batch() * c.positions(env());
  void* xn = c.fwd_work(fw_xn_);
  norm_.forward(c, positions(c), xn, static_cast<float*>(c.saved(sv_stats_)), rows);
  if (in_.scale != 1.0f) DSCPP_CALL(c.ops(), scale, in_.scale, xn, rows * hidden_);
  proj_.forward(c, xn, c.ctx.output, rows);
  if (c.ctx.target == nullptr) return;  // predicting: the output keeps the logits
  double loss_sum = 0;
  int64_t counted = 0, correct = 0;
  per_sample(c, [&](int64_t first, const int32_t* target, int64_t n) {
    double l = 0;
    int64_t k = 0, hit = 0;
    void* logits = at(c.ctx.output, first * vocab_, env());
    DSCPP_CALL(c.ops(), cross_entropy_forward, logits, target, logits, n, vocab_, &l, &k, &hit);
    loss_sum += l, counted += k, correct += hit;
  });
  counted_ = counted;
  if (c.ctx.metrics != nullptr) {
    c.ctx.metrics->loss_sum += loss_sum;
    c.ctx.metrics->counted += counted;
    c.ctx.metrics->correct += correct;
  }
}

void LmHead::backward(const Call& c) {
  const int64_t rows = c.batch() * c.positions(env());
  if (c.ctx.target == nullptr || c.ctx.grad_input == nullptr)
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + name() + ": backward needs targets and a layer before it");
  // The objective is the mean over the counted positions: d/dlogits = loss_grad/counted·(p − onehot).
  const float scale = counted_ > 0 ? c.ctx.loss_grad / static_cast<float>(counted_) : 0.0f;
  void* dlogits = c.ctx.output;  // the probabilities, turned into their gradient in place
  per_sample(c, [&](int64_t first, const int32_t* target, int64_t n) {
    void* d = at(dlogits, first * vocab_, env());
    DSCPP_CALL(c.ops(), cross_entropy_backward, d, target, d, n, vocab_, scale);
  });
  void* xn = c.bwd_work(bw_xn_);
  void* dxn = c.bwd_work(bw_dxn_);
  auto* stats = static_cast<float*>(c.saved(sv_stats_));
  const void* x = positions(c);
  norm_.forward(c, x, xn, stats, rows);
  if (in_.scale != 1.0f) DSCPP_CALL(c.ops(), scale, in_.scale, xn, rows * hidden_);
  proj_.backward(c, dlogits, vocab_, xn, dxn, false, rows);
  if (in_.scale != 1.0f) DSCPP_CALL(c.ops(), scale, in_.scale, dxn, rows * hidden_);
  // The memory's rows take no part: their gradient is zero.
  const int64_t skipped = memory_rows(c) * hidden_;
  if (skipped > 0) DSCPP_CALL(c.ops(), fill, c.ctx.grad_input, 0.0f, skipped);
  norm_.backward(c, dxn, x, stats, at(c.ctx.grad_input, skipped, env()), rows);
}

}  // namespace dscpp::layers
