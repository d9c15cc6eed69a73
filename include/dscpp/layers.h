/* dscpp layer library: transformer layers with their backward passes, for model plugins.
 *
 * A plugin built on this library declares its model as a list of layers (TokenEmbedding,
 * DecoderBlock, LmHead, or its own subclasses of Layer) and exports it with
 * DSCPP_EXPORT_MODEL; the library implements the C ABI of dscpp/model.h (descriptions, calls,
 * error messages) and every forward and backward through the ops table, so the plugin holds no
 * backward math and never touches device memory. Each layer states its parameters (with their
 * names in Hugging Face files where they have one), and the saved and workspace bytes it needs
 * per sample, from the parts it is made of (Linear, Norm, Attention, Mlp). Every part skips the
 * gradient of a frozen parameter (a null grads pointer), and a Linear carries Hugging Face PEFT's
 * LoRA adapter when the model's Lora targets it (Env::lora, which also freezes everything else).
 *
 * Link: the static library dscpp_layers (meson: dscpp_layers_dep); C++20.
 *
 * Conventions: rows = batch × context tokens; matrices row-major; Linear weights [out, in]
 * (y = x·Wᵀ + b, torch.nn.Linear's); the attention's packed projection rows are
 * [q (heads·head_dim) | k (kv_heads·head_dim) | v (kv_heads·head_dim)], head h at columns
 * h·head_dim of its part; query head h reads kv head h / (heads / kv_heads). */
#ifndef DSCPP_LAYERS_H
#define DSCPP_LAYERS_H

#include "dscpp/model.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace dscpp::layers {

// ---- errors ---------------------------------------------------------------------------------
// Thrown inside the library's entry points and turned into a status with its message.
struct Failure {
  int code;
  std::string message;
};
[[noreturn]] void fail(int code, const std::string& message);
// Fails naming the op unless status is DSCPP_OK.
void check(int status, const char* op);
#define DSCPP_CALL(ops, name, ...) \
  ::dscpp::layers::check((ops)->name != nullptr ? (ops)->name((ops), __VA_ARGS__) : DSCPP_E_UNSUPPORTED, #name)

size_t dtype_bytes(dscpp_dtype d);

// ---- memory plans -----------------------------------------------------------------------------
// A layer's saved or workspace buffer holds `batch` samples' worth of several tensors, laid out
// tensor-major (all samples of tensor 0, then of tensor 1, …) so each tensor is one contiguous
// [batch·rows, cols] matrix; every per-sample size is rounded up to 64 bytes.
class Buffers {
 public:
  int add(int64_t bytes_per_sample);  // returns the tensor's slot
  // The plan's one shared slot, as large as the largest ask (the slots after it move up when it
  // grows): scratch a part uses only inside one of its own calls, so the parts of a layer take
  // turns in it rather than each holding its own (LoRA's dropped-out input, in · rows elements).
  int add_shared(int64_t bytes_per_sample);
  int64_t bytes() const { return total_; }  // per sample
  void* at(void* base, int slot, int64_t batch) const;

 private:
  std::vector<int64_t> offset_;  // per sample, before the slot
  int64_t total_ = 0;
  int shared_ = -1;
};

// The per-token int32 arrays of a sample of a language model's data input (each `context` long).
enum class TokenPart { ids = 0, positions = 1, first_key = 2 };

// ---- LoRA ---------------------------------------------------------------------------------------
// Hugging Face PEFT 0.12's LoRA: a targeted Linear computes y = x·Wᵀ + b + scale·(drop(x)·Aᵀ)·Bᵀ
// with A [r, in] and B [out, r] its only trained parameters (drop: lora_dropout in training, the
// ops table's dropout, a mask per adapted Linear; identity in evaluation and decoding); every other
// parameter of the model is frozen (PEFT's bias "none"). The targets are PEFT's target_modules: a
// list, where a module (a weight's full name without ".weight") matches an entry it equals or ends
// with "." + entry, or a regular expression that must match the whole module name.
struct LoraSpec {
  int64_t r = 8;
  double alpha = 8;     // lora_alpha
  double dropout = 0;   // lora_dropout, in [0, 1)
  bool rslora = false;  // use_rslora: scale = alpha/√r instead of alpha/r
  std::vector<std::string> targets;
  bool regex = false;        // target_regex holds the targets instead of the list
  std::string target_regex;  // ECMAScript syntax, matched as Python's re.fullmatch
  float scale() const;
};

// The model's LoRA while its layers are made: each Linear asks whether it is a target, a target
// that names some other module is refused on the spot, and check() then fails for a target that
// named no Linear. Layers see it through Env::lora; the model owns it (Model::lora).
class Lora {
 public:
  explicit Lora(LoraSpec spec);
  const LoraSpec& spec() const { return spec_; }
  bool matches(const std::string& module) const;
  // Whether the Linear `module` gets an adapter; fails when a target names a tied one.
  bool linear(const std::string& module, bool tied, bool file_transposed);
  // A module that is not a Linear (`what`: "an embedding", "a norm", …): fails when a target names it.
  void other(const std::string& module, const std::string& what) const;
  // Fails for a target entry (or the regular expression) that matched no Linear, listing the model's.
  void check() const;
  // Whether the adapted modules' weight files hold them [in, out] (GPT-2's Conv1D): PEFT's fan_in_fan_out.
  bool fan_in_fan_out() const { return transposed_; }
  const std::vector<std::string>& adapted() const { return adapted_; }

 private:
  std::string target_of(const std::string& module) const;
  LoraSpec spec_;
  std::regex regex_;
  std::vector<std::string> linears_, adapted_;
  bool transposed_ = false;
};

// What every layer of a model shares: the compute dtype's element size, tokens per sample, and
// the layout of the data input every layer sees (dscpp_layer_ctx::data_input).
struct Env {
  size_t elem = 4;
  int64_t context = 0;  // the most positions per sample; a micro-batch may use fewer (Call::positions)
  // Documents packed in a window: a sample is [ids | positions | first keys] (TokenPart), token t's
  // position within its document and its document's first token, before which its attention
  // does not look. Otherwise a sample is its ids, positions are 0 … context−1 and attention causal.
  bool documents = false;
  int stream = 0;  // which of dscpp_layer_ctx::stream_len is this env's (an encoder-decoder's decoder: 1)
  Lora* lora = nullptr;  // the model's LoRA (Model::lora); null: none
  int64_t sample_ints() const { return documents ? 3 * context : context; }
};

struct Init {
  dscpp_init_kind kind = DSCPP_INIT_ZEROS;
  float a = 0;
};
inline Init zeros() { return {DSCPP_INIT_ZEROS, 0}; }
inline Init ones() { return {DSCPP_INIT_ONES, 0}; }
inline Init normal(float std) { return {DSCPP_INIT_NORMAL, std}; }
inline Init constant(float value) { return {DSCPP_INIT_CONSTANT, value}; }

// A parameter's names: `local` within its layer (the full name is "<layer>.<local>") unless
// `full` is given. An empty local name means "no such parameter" (e.g. no bias).
struct Name {
  std::string local, full;
  Name() = default;
  Name(const char* l) : local(l) {}
  Name(std::string l) : local(std::move(l)) {}
  Name(std::string l, std::string f) : local(std::move(l)), full(std::move(f)) {}
  bool empty() const { return local.empty(); }
};

struct ParamSpec {
  Name name;
  std::vector<int64_t> shape;
  Init init;
  std::string tied_to;  // a full name of an earlier layer's parameter; "" = its own
  bool file_transposed = false;
  dscpp_param_role role = DSCPP_ROLE_WEIGHT;
  // Not trained (requires_grad=False): backward gets a null gradient for it. With Env::lora every
  // parameter but the adapters is frozen whatever this says.
  bool frozen = false;
  bool adapter = false;  // a LoRA matrix: its initial values come from the model's adapter_from
};

class Layer;
struct Call;

// One decode call of a layer (model.h's dscpp_decode_ctx): one token of each of batch() sequences.
struct DecodeCall {
  DecodeCall(const dscpp_decode_ctx& c, const Layer& l);
  const dscpp_decode_ctx& ctx;
  const Layer& layer;
  dscpp_layer_ctx as_layer;  // the ops and parameters as a forward call sees them (batch = sequences)
  Call call() const;
  int64_t batch() const { return as_layer.batch; }
  // Sequence i's cache block (sequence-major: the runtime reorders whole blocks for beam search).
  void* cache(int slot, int64_t i = 0) const;
  // Scratch, tensor-major like a forward call's (slot's tensor for all sequences).
  void* work(int slot) const;
};

// One forward or backward call of a layer.
struct Call {
  const dscpp_layer_ctx& ctx;
  const Layer& layer;
  const DecodeCall* decode = nullptr;  // a decode call's view: its scratch is decode_work's, nothing is saved
  const dscpp_ops* ops() const { return ctx.ops; }
  int64_t batch() const { return ctx.batch; }
  const void* param(int i) const { return ctx.params[i]; }
  void* grad(int i) const { return ctx.grads[i]; }  // null for a frozen parameter
  void* saved(int slot) const;
  void* fwd_work(int slot) const;
  void* bwd_work(int slot) const;
  // Part of sample 0's token arrays in the data input (device); sample b's is Env::sample_ints() later.
  const int32_t* tokens(TokenPart part) const;
  // The positions per sample of env's stream this micro-batch uses (its rows: batch() times that).
  int64_t positions(const Env& env) const {
    const int64_t n = ctx.stream_len[env.stream];
    return n > 0 && n < env.context ? n : env.context;
  }
};

// Element offset into a tensor of the compute dtype.
inline void* at(void* p, int64_t elements, const Env& env) {
  return static_cast<char*>(p) + elements * static_cast<int64_t>(env.elem);
}
inline const void* at(const void* p, int64_t elements, const Env& env) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(env.elem);
}

class Layer {
 public:
  Layer(const Env& env, std::string name, int64_t output_numel);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  virtual void forward(const Call& c) = 0;
  virtual void backward(const Call& c) = 0;
  // One token at ctx.position (generation); layers that cannot say so.
  virtual void decode(const DecodeCall& d);

  int add_param(ParamSpec p);  // returns its index in ctx.params
  const std::string& name() const { return name_; }
  const Env& env() const { return env_; }
  int64_t output_numel() const { return output_numel_; }
  const std::vector<ParamSpec>& params() const { return params_; }
  // The full name of parameter i ("<layer>.<local>" or its own).
  std::string full_name(int i) const;
  // The ABI's view (pointers into this layer, valid while it lives).
  void describe(dscpp_layer_desc* out);

  // Per sample: kept from forward to backward, scratch of forward, scratch of backward (the two
  // scratch plans share one workspace: it is as large as the larger).
  Buffers saved, fwd_work, bwd_work;
  // Per sequence, for decode: kept between calls (a KV cache), scratch of one call; and the
  // elements one call outputs (0: the layer does not decode).
  Buffers decode_cache, decode_work;
  int64_t decode_output_numel = 0;

 private:
  Env env_;
  std::string name_;
  int64_t output_numel_;
  std::vector<ParamSpec> params_;
  std::vector<std::string> local_names_, full_names_, tied_;
  std::vector<dscpp_param_desc> descs_;
};

// ---- parts: pieces of a layer that declare their parameters and buffers on it -------------------

// y = x·Wᵀ (+ b), W [out, in]; with a LoRA adapter (Env::lora targets it) + scale·(drop(x)·Aᵀ)·Bᵀ.
// drop is the ops table's dropout over x's rows × in elements with seed ctx.rng_seed ^ FNV-1a(the
// module's full name, "model.layers.0.self_attn.q_proj"), in training calls when lora_dropout > 0.
class Linear {
 public:
  // `rows`: the rows per sample of its input, and per sequence in decoding (0: the owner's
  // context per sample, one per sequence; a cross-attention's keys: the memory's).
  Linear(Layer& owner, const Name& weight, int64_t in, int64_t out, Init init, const Name& bias = {},
         bool file_transposed = false, const std::string& tied_to = "", int64_t rows = 0);
  // y[rows × out] = x·Wᵀ + b (+ residual, which may be y itself); gelu_out = gelu(y) when given.
  void forward(const Call& c, const void* x, void* y, int64_t rows, const void* residual = nullptr,
               void* gelu_out = nullptr) const;
  // Into the first `out` columns of y, whose row stride is ld; a bias goes in through `ones`
  // (rows ones of the compute dtype, filled by the caller).
  void forward_strided(const Call& c, const void* x, void* y, int64_t ld, int64_t rows, const void* ones) const;
  // dW += dyᵀ·x, db += Σ_rows dy, and dx = dy·W (or dx += dy·W with accumulate; dx null skips);
  // dy has row stride ld (out: contiguous); `ones` as above when ld ≠ out and there is a bias.
  // With gelu_pre (not with accumulate), x was gelu(gelu_pre) and dx is taken through that GELU.
  // A frozen weight or bias (null gradient) gets none; the adapter's gradients accumulate likewise.
  void backward(const Call& c, const void* dy, int64_t ld, const void* x, void* dx, bool accumulate, int64_t rows,
                const void* ones = nullptr, const void* gelu_pre = nullptr) const;
  bool adapted() const { return lora_a >= 0; }
  int64_t in, out;
  int weight = -1, bias = -1;
  int lora_a = -1, lora_b = -1;  // the adapter's A [r, in] and B [out, r]

 private:
  void lora_forward(const Call& c, const void* x, void* y, int64_t ld, int64_t rows) const;
  void lora_backward(const Call& c, const void* dy, int64_t ld, const void* x, void* dx, int64_t rows) const;
  // The LoRA dropout's seed in this call, or nothing to drop (p = 0, evaluation, decoding).
  std::optional<uint64_t> dropout_seed(const Call& c) const;
  int64_t rank_ = 0;
  float scale_ = 0;
  float dropout_ = 0;
  uint64_t dropout_salt_ = 0;  // the module's name hashed: each adapted Linear draws its own mask
  int sv_ax_ = -1, bw_dyb_ = -1, dw_ax_ = -1;
  int fw_drop_ = -1, bw_drop_ = -1;  // the layer's shared scratch for drop(x) (and the input's gradient term)
};

enum class NormKind { rms, layer };

// A feed-forward activation: SiLU (gated: SwiGLU), GELU's tanh form (gated: T5 v1.1's gated-gelu),
// ReLU (T5 v1.0).
enum class Activation { silu, gelu_tanh, relu };

// RMSNorm (weight only) or LayerNorm (weight and bias) over the last dimension.
class Norm {
 public:
  Norm(Layer& owner, NormKind kind, const Name& weight, const Name& bias, int64_t dim, float eps,
       Init weight_init = ones());
  int64_t stats_floats(int64_t rows) const { return kind == NormKind::rms ? rows : 2 * rows; }
  void forward(const Call& c, const void* x, void* y, float* stats, int64_t rows) const;
  // dx (may be dy) from dy; the weight (and bias) gradients accumulate.
  void backward(const Call& c, const void* dy, const void* x, const float* stats, void* dx, int64_t rows) const;
  NormKind kind;
  int64_t dim;
  float eps;
  int weight = -1, bias = -1;

 private:
  int bw_frozen_ = -1;  // where the gradients of a frozen weight or bias go (the kernels always make both)
};

// The backward of a pre-norm residual sublayer y = x + f(norm(x)), every block's unit: the norm's
// output is made again into xn (the same bits as forward), f_backward(dy, xn, scratch) writes the
// gradient of f's input into scratch, and dx = norm's backward of it + dy. dx may be scratch, not dy.
template <class FBackward>
void residual_backward(const Call& c, const Norm& norm, const void* x, float* stats, const void* dy, void* xn,
                       void* scratch, void* dx, int64_t rows, FBackward&& f_backward) {
  norm.forward(c, x, xn, stats, rows);
  f_backward(dy, static_cast<const void*>(xn), scratch);
  norm.backward(c, scratch, x, stats, dx, rows);
  DSCPP_CALL(c.ops(), axpy, 1.0f, dy, dx, rows * norm.dim);
}

struct AttentionSpec {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  // One packed projection [(heads + 2·kv_heads)·head_dim, hidden] (GPT-2's c_attn), or three.
  bool fused_qkv = false;
  Name qkv, qkv_bias;                        // fused
  Name q, k, v, q_bias, k_bias, v_bias;      // separate
  Name out, out_bias;
  bool file_transposed = false;              // the projections' files hold them [in, out]
  std::optional<dscpp_rope> rope;            // rotary embedding of q and k (none: positions come elsewhere)
  // Sliding window (Mistral's sliding_window): a query sees itself and the window − 1 tokens
  // before it; 0 = no window. Training reads the first keys from the data input, so a window
  // shorter than the context needs Env::documents samples whose first keys honour it.
  int64_t window = 0;
  Init init, out_init;
};

// Causal self-attention with grouped-query heads, without T² scores (the table's flash
// attention); grouped k/v heads are repeated into scratch for it and their gradients summed back.
// With Env::documents each query attends within its own document only.
class Attention {
 public:
  Attention(Layer& owner, const AttentionSpec& spec);
  // y = residual + out(attention(x)); residual may be y.
  void forward(const Call& c, const void* x, const void* residual, void* y) const;
  // dx (overwritten) from dy, the gradient of y without the residual's share.
  void backward(const Call& c, const void* dy, const void* x, void* dx) const;
  // One token: its keys and values join the cache at d.ctx.position, its query attends to
  // positions 0 … position (grouped heads by strided batched GEMMs, no repeat).
  void decode(const DecodeCall& d, const void* x, const void* residual, void* y) const;

 private:
  void rotate(const Call& c, void* x, bool backward) const;
  const int32_t* first_keys(const Call& c) const;
  void expand(const Call& c, const void* qkv, void* qkv3) const;
  void reduce(const Call& c, const void* dqkv3, void* dqkv) const;
  AttentionSpec s_;
  const Env& env_;
  int64_t width_;  // (heads + 2·kv_heads)·head_dim
  std::optional<Linear> qkv_, q_, k_, v_, out_;  // optional only to be made in the order they run
  int sv_qkv_, sv_lse_, sv_att_;
  int fw_qkv3_ = -1, fw_ones_ = -1;
  int bw_datt_, bw_dqkv_, bw_scratch_, bw_qkv3_ = -1, bw_dqkv3_ = -1, bw_ones_ = -1;
  int dc_k_, dc_v_, dw_qkv_, dw_ones_ = -1, dw_scores_, dw_att_;
};

struct MlpSpec {
  int64_t hidden = 0, inner = 0;
  bool gated = true;            // down(act(gate(x)) ⊙ up(x)); else proj(act(fc(x)))
  Activation act = Activation::silu;
  Name gate, up, down;          // gated
  Name fc, fc_bias, proj, proj_bias;  // GELU
  bool file_transposed = false;
  Init init, out_init;
};

// Over the owner's Env::context rows per sample (one row per sequence in decode).
class Mlp {
 public:
  Mlp(Layer& owner, const MlpSpec& spec);
  void forward(const Call& c, const void* x, const void* residual, void* y) const;
  void backward(const Call& c, const void* dy, const void* x, void* dx) const;
  void decode(const DecodeCall& d, const void* x, const void* residual, void* y) const;

 private:
  void activate(const Call& c, const void* a, const void* b, void* act, int64_t rows) const;
  MlpSpec s_;
  const Env& env_;
  std::optional<Linear> gate_, up_, fc_, down_;
  int sv_a_, sv_b_ = -1;  // gated: gate and up outputs; else the pre-activation
  int fw_act_, bw_act_, bw_dact_, bw_tmp_ = -1;
  int dw_a_, dw_b_, dw_act_;
};

// ---- layers ---------------------------------------------------------------------------------------

// Token ids (int32, context per sample) → rows of the embedding table, plus learned positions
// when `positions` is named (GPT-2's wpe, [max_positions ≥ context, hidden]): a window uses its
// first context rows, or with Env::documents the row of each token's position in its document.
class TokenEmbedding final : public Layer {
 public:
  TokenEmbedding(const Env& env, std::string name, int64_t vocab, int64_t hidden, const Name& table, Init init,
                 const Name& positions = {}, int64_t max_positions = 0);
  void forward(const Call& c) override;
  void backward(const Call& c) override;
  void decode(const DecodeCall& d) override;
  int64_t vocab, hidden, max_positions;
  int table = -1, positions = -1;

 private:
  int fw_positions_ = -1;  // with Env::documents: each token's position row
};

struct BlockSpec {
  NormKind norm = NormKind::rms;
  float eps = 1e-5f;
  Name norm1, norm1_bias, norm2, norm2_bias;
  AttentionSpec attention;
  MlpSpec mlp;
};

// A pre-norm transformer block: h = x + attention(norm1(x)); y = h + mlp(norm2(h)).
class DecoderBlock final : public Layer {
 public:
  DecoderBlock(const Env& env, std::string name, const BlockSpec& spec);
  void forward(const Call& c) override;
  void backward(const Call& c) override;
  void decode(const DecodeCall& d) override;

 private:
  int64_t hidden_;
  Norm norm1_;
  Attention attn_;
  Norm norm2_;
  Mlp mlp_;
  int sv_stats1_, sv_h_, sv_stats2_, fw_xn_, bw_xn_, bw_dxn_, bw_dh_, dw_xn_, dw_h_, dw_stats_;
};

// What an LmHead's input holds besides the positions it predicts from, and how they are scaled.
struct HeadInput {
  // The stream whose rows come first in the input and take no part (an encoder-decoder's memory,
  // laid out before the decoder's rows: [batch·memory positions | batch·positions] × hidden);
  // null: none. It must outlive the layer.
  const Env* memory = nullptr;
  // norm(x) is multiplied by this before the projection (T5's d_model^−0.5 with a tied head).
  float scale = 1.0f;
  Init norm_init = ones();  // the final norm's weight (T5: initializer_factor)
};

// The loss layer: final norm, logits = norm(x)·Wᵀ (W its own [vocab, hidden] or tied to the
// embedding table), and the mean cross-entropy over the positions whose target is ≥ 0. Its
// output is the logits; in a training forward the softmax probabilities replace them in place
// (backward's input), so the layer needs no vocabulary-sized buffer of its own.
class LmHead final : public Layer {
 public:
  LmHead(const Env& env, std::string name, int64_t hidden, int64_t vocab, NormKind norm, float eps,
         const Name& norm_weight, const Name& norm_bias, const Name& weight, Init init,
         const std::string& tied_to = "", const HeadInput& input = {});
  void forward(const Call& c) override;
  void backward(const Call& c) override;
  void decode(const DecodeCall& d) override;  // the next token's logits

 private:
  const void* positions(const Call& c) const;  // the rows after the memory's
  int64_t memory_rows(const Call& c) const;
  // rows(first row, its targets, rows): the loss's rows, in one run or one per sample.
  template <class Rows>
  void per_sample(const Call& c, Rows&& rows) const;
  int64_t hidden_, vocab_;
  HeadInput in_;
  Norm norm_;
  Linear proj_;
  int sv_stats_, fw_xn_, bw_xn_, bw_dxn_, dw_xn_, dw_stats_;
  int64_t counted_ = 0;  // rows the last training forward counted (its backward follows it)
};

// ---- models ---------------------------------------------------------------------------------------

class Model {
 public:
  virtual ~Model() = default;
  // One sample of a split (0 train, 1 eval) into host buffers (model.h's load_sample).
  virtual void load_sample(int32_t split, int64_t index, void* input, int32_t* target) const = 0;
  // The positions of each stream a micro-batch of host samples needs (model.h's batch_lengths);
  // {0, 0}: all (every sample padded to the maxima).
  virtual std::array<int64_t, 2> batch_lengths(const void* inputs, const int32_t* targets, int64_t batch) const {
    (void)inputs, (void)targets, (void)batch;
    return {0, 0};
  }

  template <class L, class... Args>
  L& add(Args&&... args) {
    layers.push_back(std::make_unique<L>(std::forward<Args>(args)...));
    return static_cast<L&>(*layers.back());
  }
  void log(const std::string& line) const {
    if (host.log != nullptr) host.log(host.runtime, line.c_str());
  }

  std::vector<std::unique_ptr<Layer>> layers;
  dscpp_data_desc data{};
  dscpp_host_info host{};
  // model.h's dscpp_model_desc fields ("" = none).
  std::string init_from, export_config, adapter_from, adapter_config;
  std::unique_ptr<Lora> lora;  // the layers' LoRA (their Env::lora); null: none
  bool init_partial = false;
  // An encoder-decoder's (model.h's dscpp_model_desc): 0 encoder layers for a decoder only.
  int32_t encoder_layers = 0;
  int64_t encoder_len = 0, encoder_width = 0;
  int32_t decoder_start_id = -1, eos_id = -1, pad_id = -1;
  // Other names weight files may hold a parameter under: {alias, owner's full name}.
  std::vector<std::pair<std::string, std::string>> weight_aliases;
  // The ABI's description (pointers into this model, valid while it lives).
  void describe(dscpp_model_desc* out);

 private:
  std::vector<const char*> alias_ptrs_;  // the ABI's view of weight_aliases
};

// argv[0] is the plugin's path; the rest are its arguments.
using ModelFactory = std::unique_ptr<Model> (*)(const std::vector<std::string>& args, const dscpp_host_info& host);
// The plugin's API table for a model made by `factory` (one per shared object).
const dscpp_model_api* model_api(const char* name, ModelFactory factory);

}  // namespace dscpp::layers

#define DSCPP_EXPORT_MODEL(NAME, FACTORY)                                                   \
  extern "C" __attribute__((visibility("default"))) const dscpp_model_api* dscpp_model_entry(void) { \
    return ::dscpp::layers::model_api(NAME, FACTORY);                                         \
  }

#endif /* DSCPP_LAYERS_H */
