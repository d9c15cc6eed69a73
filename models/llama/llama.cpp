// Llama-family causal language models (Llama 2/3, Mistral with its sliding window, Qwen2's
// attention biases) from a Hugging Face config.json, in Hugging Face's parameter names, on the
// layer library: this file holds no backward math. Plugin arguments: models/common/causal_lm.h.
#include "causal_lm.h"

#include <cmath>

namespace {

using namespace dscpp::layers;
using dscpp::models::CausalLM;
using dscpp::models::HfConfig;

dscpp_rope rope_of(const HfConfig& c) {
  dscpp_rope r{};
  r.theta = static_cast<float>(c.number("rope_theta", 10000.0));
  if (!c.has("rope_scaling")) return r;
  const auto& s = c.json()["rope_scaling"];
  const std::string type = s.value("rope_type", s.value("type", std::string()));
  if (type == "llama3") {
    r.llama3_factor = s.value("factor", 0.0f);
    r.low_freq_factor = s.value("low_freq_factor", 0.0f);
    r.high_freq_factor = s.value("high_freq_factor", 0.0f);
    r.original_max_position = s.value("original_max_position_embeddings", 0.0f);
  } else if (type == "linear") {
    r.linear_factor = s.value("factor", 0.0f);
  } else if (type != "default") {
    c.bad("rope_scaling", "rope_type \"llama3\", \"linear\" or \"default\" (the ones dscpp implements)");
  }
  return r;
}

std::unique_ptr<Model> make(const std::vector<std::string>& args, const dscpp_host_info& host) {
  auto m = std::make_unique<CausalLM>("llama", args, host);
  const HfConfig& c = m->config();
  const std::string type = c.string("model_type", "llama");
  if (type != "llama" && type != "mistral" && type != "qwen2")
    c.bad("model_type", "\"llama\", \"mistral\" or \"qwen2\"");
  if (c.string("hidden_act", "silu") != "silu") c.bad("hidden_act", "\"silu\"");
  const int64_t V = c.integer("vocab_size"), C = c.integer("hidden_size"), L = c.integer("num_hidden_layers");
  const int64_t H = c.integer("num_attention_heads"), KV = c.integer("num_key_value_heads", H);
  const bool tied = c.boolean("tie_word_embeddings", false);
  // Mistral's sliding window (null: none); Qwen2's applies to some layers only, in some of
  // transformers' attention implementations: refused.
  const bool windowed = type == "mistral" && c.has("sliding_window");
  const int64_t window = windowed ? c.integer("sliding_window") : 0;
  if (windowed && window <= 0) c.bad("sliding_window", "a positive number of tokens, or null");
  if (type == "qwen2" && c.boolean("use_sliding_window", false))
    c.bad("use_sliding_window", "false (Qwen2's per-layer sliding windows are not implemented)");
  const Env env = m->env(c.integer("max_position_embeddings", 2048), window);
  const Init init = normal(static_cast<float>(c.number("initializer_range", 0.02)));
  const float eps = static_cast<float>(c.number("rms_norm_eps", 1e-6));
  // Qwen2 biases q, k and v (its config does not say so); Llama's attention_bias covers all four.
  const bool qkv_bias = type == "qwen2" || c.boolean("attention_bias", false);
  const bool out_bias = type != "qwen2" && c.boolean("attention_bias", false);
  if (c.boolean("mlp_bias", false)) c.bad("mlp_bias", "false (biased SwiGLU projections are not implemented)");

  BlockSpec b;
  b.eps = eps;
  b.norm1 = "input_layernorm.weight";
  b.norm2 = "post_attention_layernorm.weight";
  AttentionSpec& a = b.attention;
  a.hidden = C, a.heads = H, a.kv_heads = KV, a.head_dim = c.integer("head_dim", C / H);
  a.q = "self_attn.q_proj.weight", a.k = "self_attn.k_proj.weight", a.v = "self_attn.v_proj.weight";
  a.out = "self_attn.o_proj.weight";
  if (qkv_bias)
    a.q_bias = "self_attn.q_proj.bias", a.k_bias = "self_attn.k_proj.bias", a.v_bias = "self_attn.v_proj.bias";
  if (out_bias) a.out_bias = "self_attn.o_proj.bias";
  a.rope = rope_of(c);
  a.window = window;
  a.init = a.out_init = init;
  MlpSpec& f = b.mlp;
  f.hidden = C, f.inner = c.integer("intermediate_size"), f.gated = true;
  f.gate = "mlp.gate_proj.weight", f.up = "mlp.up_proj.weight", f.down = "mlp.down_proj.weight";
  f.init = f.out_init = init;

  m->add<TokenEmbedding>(env, "model", V, C, Name("embed_tokens.weight"), init);
  for (int64_t i = 0; i < L; ++i) m->add<DecoderBlock>(env, "model.layers." + std::to_string(i), b);
  m->add<LmHead>(env, "lm_head", C, V, NormKind::rms, eps, Name("norm.weight", "model.norm.weight"), Name{},
                 Name("weight"), init, tied ? "model.embed_tokens.weight" : "");
  m->data_from(V);
  return m;
}

}  // namespace

DSCPP_EXPORT_MODEL("llama", make)
