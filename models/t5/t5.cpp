// T5-family encoder-decoders from a Hugging Face config.json, in Hugging Face's parameter names, on
// the layer library: T5 v1.0 (t5-small …: ReLU, the head tied to the embedding and fed
// d_model^−0.5·x) and v1.1 (flan-t5, T0, mT5: gated GELU, an untied lm_head). This file holds no
// backward math. Plugin arguments (after `--`):
//   --from_hf DIR | --config FILE [--init_partial]   as the other families (models/common/causal_lm.h)
//   --lora SPEC | --lora_from DIR   a LoRA adapter (PEFT's), as the other families (models/common/lora_config.h)
//   --data FILE, --eval_data FILE   JSON lines (models/common/seq2seq_data.h): translation pairs,
//                                   text/summary pairs, or token ids
//   --tokenizer DIR                 for text lines (default: --from_hf's directory)
//   --source_lang L --target_lang L --source_prefix TEXT --text_column K --summary_column K
//   --max_source_length N (1024) --max_target_length N (128) --truncation --pad_to_max_length
// A sample holds its source padded to the longest source in the data (every source with
// --pad_to_max_length, or without --data), then its decoder inputs, the labels shifted right after
// decoder_start_token_id, padded likewise. Each micro-batch is computed over its own longest source
// and target only (batch_lengths), as transformers' DataCollatorForSeq2Seq pads a batch; with
// --pad_to_max_length over the maxima. Padding changes no number: attention never sees a padded key
// and padded labels take no loss.
#include "causal_lm.h"
#include "dscpp/seq2seq_layers.h"
#include "lora_config.h"
#include "seq2seq_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

namespace {

using namespace dscpp::layers;
using dscpp::models::Args;
using dscpp::models::HfConfig;
using dscpp::models::Seq2SeqExample;
using dscpp::models::Seq2SeqOptions;

// feed_forward_proj as transformers reads it: "[gated-]ACT", "gated-gelu" meaning GELU's tanh form.
MlpSpec mlp_of(const HfConfig& c) {
  const std::string ff = c.string("feed_forward_proj", "relu");
  const bool gated = ff.rfind("gated-", 0) == 0;
  const std::string act = gated ? ff.substr(6) : ff;
  MlpSpec m;
  m.gated = gated;
  if (act == "relu" && !gated) m.act = Activation::relu;
  else if (act == "gelu_new" || (gated && act == "gelu")) m.act = Activation::gelu_tanh;
  else if (act == "silu" && gated) m.act = Activation::silu;
  else c.bad("feed_forward_proj", "\"relu\", \"gelu_new\", \"gated-gelu\", \"gated-gelu_new\" or \"gated-silu\"");
  return m;
}

class T5 final : public Model {
 public:
  T5(const std::vector<std::string>& argv, const dscpp_host_info& h)
      : args_("t5", argv, {"--init_partial", "--truncation", "--pad_to_max_length"}) {
    host = h;
    config_ = dscpp::models::model_source("t5", args_, *this);
    const HfConfig& c = *config_;
    const std::string type = c.string("model_type", "t5");
    if (type != "t5" && type != "mt5")
      c.bad("model_type", "\"t5\" or \"mt5\" (UMT5's per-layer biases are not implemented)");
    if (!c.boolean("is_encoder_decoder", true)) c.bad("is_encoder_decoder", "true");
    vocab_ = c.integer("vocab_size");
    pad_id = static_cast<int32_t>(c.integer("pad_token_id", 0));
    eos_id = static_cast<int32_t>(c.integer("eos_token_id", 1));
    decoder_start_id = static_cast<int32_t>(c.integer("decoder_start_token_id", pad_id));
    read_data();
    args_.finish();
    build();
    dscpp::models::lora_finish("t5", *this, "SEQ_2_SEQ_LM");
  }

  void load_sample(int32_t split, int64_t index, void* input, int32_t* target) const override {
    const auto& set = split == 0 ? train_ : eval_;
    if (index < 0 || index >= static_cast<int64_t>(set.size()))
      fail(DSCPP_E_INVALID_ARGUMENT, "t5: sample " + std::to_string(index) + " of a split of " +
                                         std::to_string(set.size()));
    const Seq2SeqExample& e = set[static_cast<size_t>(index)];
    auto* in = static_cast<int32_t*>(input);
    const int64_t S = shape_.source_len(), T = shape_.target_len();
    std::fill(in, in + shape_.sample_ints(), pad_id);
    std::copy(e.input_ids.begin(), e.input_ids.end(), in);
    in[S] = static_cast<int32_t>(e.input_ids.size());
    // transformers' shift right: decoder_start, then the labels but the last, ignored ones as padding.
    int32_t* dec = in + S + 1;
    dec[0] = decoder_start_id;
    for (size_t t = 0; t + 1 < e.labels.size() && static_cast<int64_t>(t) + 1 < T; ++t)
      dec[t + 1] = e.labels[t] < 0 ? pad_id : e.labels[t];
    std::fill(target, target + T, -1);
    for (size_t t = 0; t < e.labels.size(); ++t) target[t] = e.labels[t] < 0 ? -1 : e.labels[t];
  }

  // The micro-batch's longest source (its length follows the source ids) and the last labelled
  // target position: later decoder rows see nothing earlier rows need (causal) and take no loss.
  std::array<int64_t, 2> batch_lengths(const void* inputs, const int32_t* targets, int64_t batch) const override {
    if (pad_to_max_) return {0, 0};
    const auto* in = static_cast<const int32_t*>(inputs);
    const int64_t S = shape_.source_len(), T = shape_.target_len();
    int64_t s = 1, t = 1;
    for (int64_t b = 0; b < batch; ++b) {
      s = std::max<int64_t>(s, std::clamp<int64_t>(in[b * shape_.sample_ints() + S], 1, S));
      for (int64_t i = T; i > t; --i)
        if (targets[b * T + i - 1] >= 0) {
          t = i;
          break;
        }
    }
    return {s, t};
  }

 private:
  void read_data() {
    Seq2SeqOptions o;
    o.source_lang = args_.text("--source_lang");
    o.target_lang = args_.text("--target_lang");
    o.text_column = args_.text("--text_column");
    o.summary_column = args_.text("--summary_column");
    o.source_prefix = args_.text("--source_prefix");
    o.max_source_length = args_.integer("--max_source_length", 1024, 1);
    o.max_target_length = args_.integer("--max_target_length", 128, 1);
    o.truncation = args_.has("--truncation");
    o.vocab_size = vocab_;
    const bool pad_to_max = args_.has("--pad_to_max_length");
    pad_to_max_ = pad_to_max;
    const std::string train = args_.text("--data"), eval = args_.text("--eval_data");
    std::string tok_dir = args_.text("--tokenizer");
    if (tok_dir.empty() && !init_from.empty() && std::filesystem::exists(init_from + "/tokenizer.json"))
      tok_dir = init_from;
    std::unique_ptr<dscpp::tok::Tokenizer> tokenizer;
    if (!tok_dir.empty()) tokenizer = std::make_unique<dscpp::tok::Tokenizer>(dscpp::tok::Tokenizer::load(tok_dir));
    dscpp::models::Seq2SeqCounts train_counts, eval_counts;
    if (!train.empty()) train_ = dscpp::models::read_seq2seq(train, o, tokenizer.get(), &train_counts);
    if (!eval.empty()) eval_ = dscpp::models::read_seq2seq(eval, o, tokenizer.get(), &eval_counts);
    if (train.empty() && !eval.empty()) fail(DSCPP_E_INVALID_ARGUMENT, "t5: --eval_data needs --data");
    int64_t S = 1, T = 1;
    for (const auto* set : {&train_, &eval_})
      for (const Seq2SeqExample& e : *set) {
        S = std::max<int64_t>(S, static_cast<int64_t>(e.input_ids.size()));
        T = std::max<int64_t>(T, static_cast<int64_t>(e.labels.size()));
      }
    if (pad_to_max || train.empty()) S = o.max_source_length, T = o.max_target_length;
    // Token ids read as they are may be longer than the maxima (they are never cut).
    if (S > o.max_source_length || T > o.max_target_length)
      fail(DSCPP_E_INVALID_ARGUMENT, "t5: the data holds a source of " + std::to_string(S) + " or a target of " +
                                         std::to_string(T) + " tokens, more than --max_source_length " +
                                         std::to_string(o.max_source_length) + " / --max_target_length " +
                                         std::to_string(o.max_target_length));
    Env e;
    e.elem = dtype_bytes(host.compute_dtype);
    e.lora = lora.get();
    shape_.encoder = shape_.decoder = e;
    shape_.encoder.context = S;
    shape_.decoder.stream = 1;
    shape_.decoder.context = T;
    if (!train.empty())
      log("t5: " + std::to_string(train_.size()) + " train / " + std::to_string(eval_.size()) +
          " eval pairs; samples hold " + std::to_string(S) + " source and " + std::to_string(T) +
          " target positions (" + (pad_to_max ? "--pad_to_max_length" : "the longest in the data") + ")");
    // What --truncation cut, and what a summarization file skipped, said once per file.
    for (const auto& [what, n] : {std::pair{"train", train_counts}, std::pair{"eval", eval_counts}}) {
      if (n.truncated_sources + n.truncated_targets > 0)
        log("t5: --truncation cut " + std::to_string(n.truncated_sources) + " " + what + " sources to " +
            std::to_string(o.max_source_length) + " tokens and " + std::to_string(n.truncated_targets) +
            " targets to " + std::to_string(o.max_target_length));
      if (n.skipped > 0)
        log("t5: skipped " + std::to_string(n.skipped) + " " + what + " pairs with an empty text or summary");
    }
  }

  void build() {
    const HfConfig& c = *config_;
    const int64_t d = c.integer("d_model"), dkv = c.integer("d_kv"), dff = c.integer("d_ff");
    const int64_t H = c.integer("num_heads"), Le = c.integer("num_layers");
    const int64_t Ld = c.integer("num_decoder_layers", Le);
    const bool tied = c.boolean("tie_word_embeddings", true);
    const float f = static_cast<float>(c.number("initializer_factor", 1.0));
    const auto inv_sqrt = [](double x) { return static_cast<float>(1.0 / std::sqrt(x)); };
    RelativeBiasSpec rb;
    rb.num_buckets = static_cast<int32_t>(c.integer("relative_attention_num_buckets", 32));
    rb.max_distance = static_cast<int32_t>(c.integer("relative_attention_max_distance", 128));
    if (rb.num_buckets < 4) c.bad("relative_attention_num_buckets", "at least 4");
    rb.init = normal(f * inv_sqrt(double(d)));
    rb.table = Name("layer.0.SelfAttention.relative_attention_bias.weight");
    BiasedAttentionSpec a;
    a.hidden = d, a.heads = H, a.head_dim = dkv;
    a.q_init = normal(f * inv_sqrt(double(d) * double(dkv)));
    a.kv_init = normal(f * inv_sqrt(double(d)));
    a.out_init = normal(f * inv_sqrt(double(H) * double(dkv)));
    MlpSpec m = mlp_of(c);
    m.hidden = d, m.inner = dff;
    m.init = normal(f * inv_sqrt(double(d)));
    m.out_init = normal(f * inv_sqrt(double(dff)));

    const float eps = static_cast<float>(c.number("layer_norm_epsilon", 1e-6));
    const Init norm_init = constant(f);  // transformers fills T5's layer norms with the factor
    const std::string enc_bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    const std::string dec_bias = "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    add<SourceEmbedding>(shape_, "shared", vocab_, d, Name("weight"), normal(f));
    // transformers' pytorch_model.bin files also hold the encoder's view of the shared embedding.
    weight_aliases.emplace_back("encoder.embed_tokens.weight", "shared.weight");
    for (int64_t i = 0; i < Le; ++i) {
      T5BlockSpec b = block(a, m, eps, "layer.1.DenseReluDense.");
      b.norm_init = norm_init;
      b.norm2 = "layer.1.layer_norm.weight";
      b.self.bias = rb;
      b.self.bias->bidirectional = true;
      b.self.bias->tied_to = i == 0 ? "" : enc_bias;
      add<EncoderBlock>(shape_, "encoder.block." + std::to_string(i), b);
    }
    add<FinalNorm>(shape_.encoder, "encoder.final_layer_norm", d, eps, Name("weight"), norm_init);
    encoder_layers = static_cast<int32_t>(layers.size());
    encoder_len = shape_.source_len(), encoder_width = d;
    add<DecoderEmbedding>(shape_, "decoder.embed_tokens", vocab_, d, Name("weight"), "shared.weight");
    for (int64_t i = 0; i < Ld; ++i) {
      T5BlockSpec b = block(a, m, eps, "layer.2.DenseReluDense.");
      b.norm_init = norm_init;
      b.norm2 = "layer.1.layer_norm.weight";
      b.norm3 = "layer.2.layer_norm.weight";
      b.self.causal = true;
      b.self.bias = rb;
      b.self.bias->bidirectional = false;
      b.self.bias->tied_to = i == 0 ? "" : dec_bias;
      b.cross = a;
      b.cross.cross = true;
      b.cross.q = "layer.1.EncDecAttention.q.weight", b.cross.k = "layer.1.EncDecAttention.k.weight";
      b.cross.v = "layer.1.EncDecAttention.v.weight", b.cross.out = "layer.1.EncDecAttention.o.weight";
      add<CrossDecoderBlock>(shape_, "decoder.block." + std::to_string(i), b);
    }
    HeadInput in;
    in.memory = &shape_.encoder;
    if (tied) in.scale = inv_sqrt(double(d));
    in.norm_init = norm_init;
    add<LmHead>(shape_.decoder, "lm_head", d, vocab_, NormKind::rms, eps,
                Name("final_layer_norm.weight", "decoder.final_layer_norm.weight"), Name{}, Name("weight"), normal(f),
                tied ? "shared.weight" : "", in);
    data.train_size = static_cast<int64_t>(train_.size());
    data.eval_size = static_cast<int64_t>(eval_.size());
    data.input_dtype = DSCPP_I32;
    data.input_numel = shape_.sample_ints();
    data.target_dtype = DSCPP_I32;
    data.target_numel = shape_.target_len();
    data.tokens_per_sample = shape_.source_len() + shape_.target_len();
  }

  // The parts every block of a stack names alike: its self-attention, first norm and feed-forward.
  static T5BlockSpec block(const BiasedAttentionSpec& a, const MlpSpec& m, float eps, const std::string& ff) {
    T5BlockSpec b;
    b.eps = eps;
    b.norm1 = "layer.0.layer_norm.weight";
    b.self = a;
    b.self.q = "layer.0.SelfAttention.q.weight", b.self.k = "layer.0.SelfAttention.k.weight";
    b.self.v = "layer.0.SelfAttention.v.weight", b.self.out = "layer.0.SelfAttention.o.weight";
    b.mlp = m;
    if (m.gated) b.mlp.gate = ff + "wi_0.weight", b.mlp.up = ff + "wi_1.weight";
    else b.mlp.fc = ff + "wi.weight";
    b.mlp.down = ff + "wo.weight", b.mlp.proj = ff + "wo.weight";
    return b;
  }

  Args args_;
  std::unique_ptr<HfConfig> config_;
  int64_t vocab_ = 0;
  Seq2SeqShape shape_;
  bool pad_to_max_ = false;
  std::vector<Seq2SeqExample> train_, eval_;
};

std::unique_ptr<Model> make(const std::vector<std::string>& args, const dscpp_host_info& host) {
  return std::make_unique<T5>(args, host);
}

}  // namespace

DSCPP_EXPORT_MODEL("t5", make)
