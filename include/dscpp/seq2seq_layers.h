/* dscpp layer library, encoder-decoder part: T5-style attention with a relative position bias and
 * the layers of an encoder-decoder (dscpp/model.h's encoder_layers).
 *
 * The chain of layers carries two streams. The encoder's layers work on the source's rows,
 * source_len per sample; the decoder's layers take [memory | decoder rows] laid out tensor-major,
 * [batch·source_len | batch·target_len] × hidden, and pass the memory (the encoder's output) on
 * unchanged, adding the cross-attention's gradient of it to the gradient they pass back. So ZeRO
 * stage 3's gather order, activation checkpointing and the memory plan see an ordinary chain.
 *
 * A sample's data input (int32) is model.h's encoder-decoder layout: the source ids padded to
 * source_len, the number of real ones, then the decoder's input ids (target_len). */
#ifndef DSCPP_SEQ2SEQ_LAYERS_H
#define DSCPP_SEQ2SEQ_LAYERS_H

#include "dscpp/layers.h"

namespace dscpp::layers {

// The two stacks' shapes: each stack's layers are made with its own Env (context = its rows per
// sample), and every layer knows where the data input keeps what.
struct Seq2SeqShape {
  Env encoder, decoder;  // context: source_len, target_len (the maxima); stream 0 and 1
  int64_t source_len() const { return encoder.context; }
  int64_t target_len() const { return decoder.context; }
  int64_t sample_ints() const { return source_len() + 1 + target_len(); }
  // The positions this micro-batch uses (its longest source and target: Call::positions).
  int64_t source_len(const Call& c) const { return c.positions(encoder); }
  int64_t target_len(const Call& c) const { return c.positions(decoder); }
};

// T5's relative position bias: a [num_buckets, heads] table (transformers' relative_attention_bias),
// owned by the first layer of a stack and tied to it by the others.
struct RelativeBiasSpec {
  int32_t num_buckets = 32, max_distance = 128;
  bool bidirectional = true;  // the encoder's; the decoder's self-attention is causal
  Name table;
  std::string tied_to;  // "" in the stack's first layer
  Init init;
};

struct BiasedAttentionSpec {
  int64_t hidden = 0, heads = 0, head_dim = 0;
  Name q, k, v, out;
  bool cross = false;   // keys and values from the memory (the encoder's output)
  bool causal = false;  // a query sees itself and the keys before it
  std::optional<RelativeBiasSpec> bias;
  Init q_init, kv_init, out_init;
};

// Which keys a sample's queries see: the first len[b·ld] (device int32), or all when len is null.
struct KeyLimit {
  const int32_t* len = nullptr;
  int64_t ld = 1;
};

// Attention without the 1/√d scale whose scores take an additive bias (T5's): softmax(q·kᵀ +
// bias + mask)·v with separate q, k, v, o projections, over the owner's rows per sample as queries
// and the rows of `keys` (the owner's own env, or the encoder's for a cross-attention) as keys,
// as many as the micro-batch uses of each; the probabilities are kept for backward.
class BiasedAttention {
 public:
  BiasedAttention(Layer& owner, const BiasedAttentionSpec& spec, const Env& keys);
  // y = residual + out(attention(x)) (residual may be y); keys and values from x, or from memory (cross).
  void forward(const Call& c, const void* x, const void* memory, KeyLimit keys, const void* residual, void* y) const;
  // dx (overwritten) from dy; a cross-attention adds the memory's gradient into dmemory.
  void backward(const Call& c, const void* dy, const void* x, const void* memory, KeyLimit keys, void* dx,
                void* dmemory) const;
  // One token of each sequence: a self-attention appends its keys and values to the cache; a
  // cross-attention computes the memory's at position 0 and reads them after.
  void decode(const DecodeCall& d, const void* x, const void* residual, void* y) const;

 private:
  void bias(const Call& c, void* out, int64_t Tq, int64_t Tk, int64_t q0) const;
  BiasedAttentionSpec s_;
  const Env& env_;
  const Env& keys_;  // its context: the most key positions (the cache's in decoding)
  int64_t inner_;
  std::optional<Linear> q_, k_, v_, out_;
  int table_ = -1;
  int sv_q_, sv_k_, sv_v_, sv_probs_, sv_att_, fw_bias_ = -1;
  int bw_datt_, bw_dprobs_, bw_dq_, bw_dk_, bw_dv_, bw_dbias_ = -1;
  int dc_k_, dc_v_, dw_q_, dw_k_ = -1, dw_v_ = -1, dw_scores_, dw_bias_ = -1, dw_att_;
};

// The source ids of each sample → rows of the shared embedding table (the encoder's first layer).
class SourceEmbedding final : public Layer {
 public:
  SourceEmbedding(const Seq2SeqShape& shape, std::string name, int64_t vocab, int64_t hidden, const Name& table,
                  Init init);
  void forward(const Call& c) override;
  void backward(const Call& c) override;

 private:
  Seq2SeqShape shape_;
  int64_t vocab_, hidden_;
  int table_;
};

struct T5BlockSpec {
  float eps = 1e-6f;
  Name norm1, norm2, norm3;       // before self-attention, cross-attention (decoder), feed-forward
  Init norm_init = ones();
  BiasedAttentionSpec self, cross;  // cross: the decoder's
  MlpSpec mlp;
};

// An encoder block: h = x + self_attention(norm1(x)) over the source's real keys;
// y = h + mlp(norm2(h)).
class EncoderBlock final : public Layer {
 public:
  EncoderBlock(const Seq2SeqShape& shape, std::string name, const T5BlockSpec& spec);
  void forward(const Call& c) override;
  void backward(const Call& c) override;

 private:
  KeyLimit keys(const Call& c) const;
  Seq2SeqShape shape_;
  int64_t hidden_;
  Norm norm1_;
  BiasedAttention attn_;
  Norm norm2_;
  Mlp mlp_;
  int sv_stats1_, sv_h_, sv_stats2_, fw_xn_, bw_xn_, bw_dxn_, bw_dh_;
};

// A stack's final RMS norm as a layer of its own (the encoder's output is its output).
class FinalNorm final : public Layer {
 public:
  FinalNorm(const Env& env, std::string name, int64_t hidden, float eps, const Name& weight, Init init = ones());
  void forward(const Call& c) override;
  void backward(const Call& c) override;

 private:
  int64_t hidden_;
  Norm norm_;
  int sv_stats_;
};

// The decoder's first layer: [memory | embedding rows of the decoder's input ids]. Decoding, the
// ids of the sequences' newest tokens.
class DecoderEmbedding final : public Layer {
 public:
  DecoderEmbedding(const Seq2SeqShape& shape, std::string name, int64_t vocab, int64_t hidden, const Name& table,
                   const std::string& tied_to);
  void forward(const Call& c) override;
  void backward(const Call& c) override;
  void decode(const DecodeCall& d) override;

 private:
  Seq2SeqShape shape_;
  int64_t vocab_, hidden_;
  int table_;
};

// A decoder block: h1 = x + self_attention(norm1(x)) (causal); h2 = h1 + cross_attention(norm2(h1),
// memory) over the source's real positions; y = h2 + mlp(norm3(h2)); the memory passes through.
class CrossDecoderBlock final : public Layer {
 public:
  CrossDecoderBlock(const Seq2SeqShape& shape, std::string name, const T5BlockSpec& spec);
  void forward(const Call& c) override;
  void backward(const Call& c) override;
  void decode(const DecodeCall& d) override;

 private:
  KeyLimit keys(const Call& c) const;
  Seq2SeqShape shape_;
  int64_t hidden_;
  Norm norm1_;
  BiasedAttention self_;
  Norm norm2_;
  BiasedAttention cross_;
  Norm norm3_;
  Mlp mlp_;
  int sv_stats1_, sv_h1_, sv_stats2_, sv_h2_, sv_stats3_, fw_xn_, bw_xn_, bw_dxn_, bw_dh_;
  int dw_xn_, dw_h1_, dw_h2_, dw_stats_;
};

}  // namespace dscpp::layers

#endif /* DSCPP_SEQ2SEQ_LAYERS_H */
