// The layers of an encoder-decoder (dscpp/seq2seq_layers.h): the source embedding, encoder blocks,
// a stack's final norm, the decoder's embedding that joins the memory to the decoder's rows, and
// decoder blocks with cross-attention.
#include "dscpp/seq2seq_layers.h"

namespace dscpp::layers {
namespace {

const int32_t* data_ints(const Call& c) {
  if (c.ctx.data_input == nullptr) fail(DSCPP_E_INTERNAL, "layer " + c.layer.name() + ": no data input");
  return static_cast<const int32_t*>(c.ctx.data_input);
}

// Each sample's source length follows its source ids.
KeyLimit source_keys(const Call& c, const Seq2SeqShape& shape) {
  return KeyLimit{data_ints(c) + shape.source_len(), shape.sample_ints()};
}

}  // namespace

// ---- SourceEmbedding ----------------------------------------------------------------------------

SourceEmbedding::SourceEmbedding(const Seq2SeqShape& shape, std::string name, int64_t vocab, int64_t hidden,
                                 const Name& table, Init init)
    : Layer(shape.encoder, std::move(name), shape.source_len() * hidden), shape_(shape), vocab_(vocab),
      hidden_(hidden) {
  table_ = add_param({table, {vocab, hidden}, init, "", false, DSCPP_ROLE_EMBEDDING});
}

void SourceEmbedding::forward(const Call& c) {
  const int64_t S = shape_.source_len(c);
  for (int64_t b = 0; b < c.batch(); ++b)
    DSCPP_CALL(c.ops(), embedding_forward, data_ints(c) + b * shape_.sample_ints(), c.param(table_),
               at(c.ctx.output, b * S * hidden_, env()), S, vocab_, hidden_);
}

void SourceEmbedding::backward(const Call& c) {
  const int64_t S = shape_.source_len(c);
  if (c.grad(table_) == nullptr) return;  // frozen
  for (int64_t b = 0; b < c.batch(); ++b)
    DSCPP_CALL(c.ops(), embedding_backward, data_ints(c) + b * shape_.sample_ints(),
               at(c.ctx.grad_output, b * S * hidden_, env()), c.grad(table_), S, vocab_, hidden_);
}

// ---- EncoderBlock -------------------------------------------------------------------------------

EncoderBlock::EncoderBlock(const Seq2SeqShape& shape, std::string name, const T5BlockSpec& s)
    : Layer(shape.encoder, std::move(name), shape.source_len() * s.self.hidden),
      shape_(shape),
      hidden_(s.self.hidden),
      norm1_(*this, NormKind::rms, s.norm1, {}, hidden_, s.eps, s.norm_init),
      attn_(*this, s.self, shape_.encoder),
      norm2_(*this, NormKind::rms, s.norm2, {}, hidden_, s.eps, s.norm_init),
      mlp_(*this, s.mlp) {
  const int64_t S = shape.source_len(), TC = S * hidden_ * static_cast<int64_t>(env().elem);
  sv_stats1_ = saved.add(S * 4);
  sv_h_ = saved.add(TC);
  sv_stats2_ = saved.add(S * 4);
  fw_xn_ = fwd_work.add(TC);
  bw_xn_ = bwd_work.add(TC);
  bw_dxn_ = bwd_work.add(TC);
  bw_dh_ = bwd_work.add(TC);
}

KeyLimit EncoderBlock::keys(const Call& c) const { return source_keys(c, shape_); }

void EncoderBlock::forward(const Call& c) {
  const int64_t rows = c.batch() * shape_.source_len(c);
  void* xn = c.fwd_work(fw_xn_);
  void* h = c.saved(sv_h_);
  norm1_.forward(c, c.ctx.input, xn, static_cast<float*>(c.saved(sv_stats1_)), rows);
  attn_.forward(c, xn, nullptr, keys(c), c.ctx.input, h);
  norm2_.forward(c, h, xn, static_cast<float*>(c.saved(sv_stats2_)), rows);
  mlp_.forward(c, xn, h, c.ctx.output);
}

void EncoderBlock::backward(const Call& c) {
  const int64_t rows = c.batch() * shape_.source_len(c);
  void* xn = c.bwd_work(bw_xn_);
  void* dxn = c.bwd_work(bw_dxn_);
  void* dh = c.bwd_work(bw_dh_);
  residual_backward(c, norm2_, c.saved(sv_h_), static_cast<float*>(c.saved(sv_stats2_)), c.ctx.grad_output, xn, dxn,
                    dh, rows, [&](const void* dy, const void* in, void* dx) { mlp_.backward(c, dy, in, dx); });
  residual_backward(c, norm1_, c.ctx.input, static_cast<float*>(c.saved(sv_stats1_)), dh, xn, dxn, c.ctx.grad_input,
                    rows, [&](const void* dy, const void* in, void* dx) {
                      attn_.backward(c, dy, in, nullptr, keys(c), dx, nullptr);
                    });
}

// ---- FinalNorm ----------------------------------------------------------------------------------

FinalNorm::FinalNorm(const Env& env, std::string name, int64_t hidden, float eps, const Name& weight, Init init)
    : Layer(env, std::move(name), env.context * hidden), hidden_(hidden),
      norm_(*this, NormKind::rms, weight, {}, hidden, eps, init) {
  sv_stats_ = saved.add(env.context * 4);
}

void FinalNorm::forward(const Call& c) {
  norm_.forward(c, c.ctx.input, c.ctx.output, static_cast<float*>(c.saved(sv_stats_)), c.batch() * c.positions(env()));
}

void FinalNorm::backward(const Call& c) {
  norm_.backward(c, c.ctx.grad_output, c.ctx.input, static_cast<float*>(c.saved(sv_stats_)), c.ctx.grad_input,
                 c.batch() * c.positions(env()));
}

// ---- DecoderEmbedding ---------------------------------------------------------------------------

DecoderEmbedding::DecoderEmbedding(const Seq2SeqShape& shape, std::string name, int64_t vocab, int64_t hidden,
                                   const Name& table, const std::string& tied_to)
    : Layer(shape.decoder, std::move(name), (shape.source_len() + shape.target_len()) * hidden),
      shape_(shape),
      vocab_(vocab),
      hidden_(hidden) {
  table_ = add_param({table, {vocab, hidden}, zeros(), tied_to, false, DSCPP_ROLE_EMBEDDING});
  decode_output_numel = hidden;
}

void DecoderEmbedding::forward(const Call& c) {
  const int64_t B = c.batch(), S = shape_.source_len(c), T = shape_.target_len(c);
  DSCPP_CALL(c.ops(), copy, c.ctx.input, c.ctx.output, B * S * hidden_);
  const int32_t* ids = data_ints(c) + shape_.source_len() + 1;  // the data keeps the longest source
  for (int64_t b = 0; b < B; ++b)
    DSCPP_CALL(c.ops(), embedding_forward, ids + b * shape_.sample_ints(), c.param(table_),
               at(c.ctx.output, (B * S + b * T) * hidden_, env()), T, vocab_, hidden_);
}

void DecoderEmbedding::backward(const Call& c) {
  const int64_t B = c.batch(), S = shape_.source_len(c), T = shape_.target_len(c);
  DSCPP_CALL(c.ops(), copy, c.ctx.grad_output, c.ctx.grad_input, B * S * hidden_);
  if (c.grad(table_) == nullptr) return;                        // frozen
  const int32_t* ids = data_ints(c) + shape_.source_len() + 1;  // the data keeps the longest source
  for (int64_t b = 0; b < B; ++b)
    DSCPP_CALL(c.ops(), embedding_backward, ids + b * shape_.sample_ints(),
               at(c.ctx.grad_output, (B * S + b * T) * hidden_, env()), c.grad(table_), T, vocab_, hidden_);
}

void DecoderEmbedding::decode(const DecodeCall& d) {
  const Call c = d.call();
  DSCPP_CALL(c.ops(), embedding_forward, static_cast<const int32_t*>(d.ctx.input), c.param(table_), d.ctx.output,
             d.batch(), vocab_, hidden_);
}

// ---- CrossDecoderBlock --------------------------------------------------------------------------

CrossDecoderBlock::CrossDecoderBlock(const Seq2SeqShape& shape, std::string name, const T5BlockSpec& s)
    : Layer(shape.decoder, std::move(name), (shape.source_len() + shape.target_len()) * s.self.hidden),
      shape_(shape),
      hidden_(s.self.hidden),
      norm1_(*this, NormKind::rms, s.norm1, {}, hidden_, s.eps, s.norm_init),
      self_(*this, s.self, shape_.decoder),
      norm2_(*this, NormKind::rms, s.norm2, {}, hidden_, s.eps, s.norm_init),
      cross_(*this, s.cross, shape_.encoder),
      norm3_(*this, NormKind::rms, s.norm3, {}, hidden_, s.eps, s.norm_init),
      mlp_(*this, s.mlp) {
  const int64_t T = shape.target_len(), e = static_cast<int64_t>(env().elem), TC = T * hidden_ * e;
  sv_stats1_ = saved.add(T * 4);
  sv_h1_ = saved.add(TC);
  sv_stats2_ = saved.add(T * 4);
  sv_h2_ = saved.add(TC);
  sv_stats3_ = saved.add(T * 4);
  fw_xn_ = fwd_work.add(TC);
  bw_xn_ = bwd_work.add(TC);
  bw_dxn_ = bwd_work.add(TC);
  bw_dh_ = bwd_work.add(TC);
  dw_xn_ = decode_work.add(hidden_ * e);
  dw_h1_ = decode_work.add(hidden_ * e);
  dw_h2_ = decode_work.add(hidden_ * e);
  dw_stats_ = decode_work.add(4);
  decode_output_numel = hidden_;
}

KeyLimit CrossDecoderBlock::keys(const Call& c) const { return source_keys(c, shape_); }

void CrossDecoderBlock::forward(const Call& c) {
  const int64_t B = c.batch(), memory = B * shape_.source_len(c) * hidden_, rows = B * shape_.target_len(c);
  const void* x = at(c.ctx.input, memory, env());
  void* y = at(c.ctx.output, memory, env());
  void* xn = c.fwd_work(fw_xn_);
  void* h1 = c.saved(sv_h1_);
  void* h2 = c.saved(sv_h2_);
  DSCPP_CALL(c.ops(), copy, c.ctx.input, c.ctx.output, memory);
  norm1_.forward(c, x, xn, static_cast<float*>(c.saved(sv_stats1_)), rows);
  self_.forward(c, xn, nullptr, {}, x, h1);
  norm2_.forward(c, h1, xn, static_cast<float*>(c.saved(sv_stats2_)), rows);
  cross_.forward(c, xn, c.ctx.input, keys(c), h1, h2);
  norm3_.forward(c, h2, xn, static_cast<float*>(c.saved(sv_stats3_)), rows);
  mlp_.forward(c, xn, h2, y);
}

void CrossDecoderBlock::backward(const Call& c) {
  const int64_t B = c.batch(), memory = B * shape_.source_len(c) * hidden_, rows = B * shape_.target_len(c);
  const void* x = at(c.ctx.input, memory, env());
  const void* dy = at(c.ctx.grad_output, memory, env());
  void* dx = at(c.ctx.grad_input, memory, env());
  const void* h1 = c.saved(sv_h1_);
  const void* h2 = c.saved(sv_h2_);
  auto* stats1 = static_cast<float*>(c.saved(sv_stats1_));
  auto* stats2 = static_cast<float*>(c.saved(sv_stats2_));
  auto* stats3 = static_cast<float*>(c.saved(sv_stats3_));
  void* xn = c.bwd_work(bw_xn_);
  void* dxn = c.bwd_work(bw_dxn_);
  void* dh = c.bwd_work(bw_dh_);
  // The memory's gradient: what later layers sent back, plus this block's cross-attention's.
  DSCPP_CALL(c.ops(), copy, c.ctx.grad_output, c.ctx.grad_input, memory);
  // y = h2 + mlp(norm3(h2)) → dh = dL/dh2; h2 = h1 + cross(norm2(h1), memory) → dxn = dL/dh1;
  // h1 = x + self(norm1(x)) → dx.
  residual_backward(c, norm3_, h2, stats3, dy, xn, dxn, dh, rows,
                    [&](const void* d, const void* in, void* out) { mlp_.backward(c, d, in, out); });
  residual_backward(c, norm2_, h1, stats2, dh, xn, dxn, dxn, rows, [&](const void* d, const void* in, void* out) {
    cross_.backward(c, d, in, c.ctx.input, keys(c), out, c.ctx.grad_input);
  });
  residual_backward(c, norm1_, x, stats1, dxn, xn, dh, dx, rows, [&](const void* d, const void* in, void* out) {
    self_.backward(c, d, in, nullptr, {}, out, nullptr);
  });
}

void CrossDecoderBlock::decode(const DecodeCall& d) {
  const Call c = d.call();
  const int64_t rows = d.batch();
  void* xn = d.work(dw_xn_);
  void* h1 = d.work(dw_h1_);
  void* h2 = d.work(dw_h2_);
  auto* stats = static_cast<float*>(d.work(dw_stats_));
  norm1_.forward(c, d.ctx.input, xn, stats, rows);
  self_.decode(d, xn, d.ctx.input, h1);
  norm2_.forward(c, h1, xn, stats, rows);
  cross_.decode(d, xn, h1, h2);
  norm3_.forward(c, h2, xn, stats, rows);
  mlp_.decode(d, xn, h2, d.ctx.output);
}

}  // namespace dscpp::layers
