// GPT-2 causal language models from a Hugging Face config.json, in Hugging Face's parameter
// names (Conv1D weights transposed to and from the files' [in, out]), on the layer library: this
// file holds no backward math. Plugin arguments: models/common/causal_lm.h.
#include "causal_lm.h"

#include <cmath>

namespace {

using namespace dscpp::layers;
using dscpp::models::CausalLM;
using dscpp::models::HfConfig;

std::unique_ptr<Model> make(const std::vector<std::string>& args, const dscpp_host_info& host) {
  auto m = std::make_unique<CausalLM>("gpt2", args, host);
  const HfConfig& c = m->config();
  if (c.string("model_type", "gpt2") != "gpt2") c.bad("model_type", "\"gpt2\"");
  const std::string act = c.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    c.bad("activation_function", "\"gelu_new\" (GELU's tanh form, the one dscpp implements)");
  if (!c.boolean("scale_attn_weights", true) || c.boolean("scale_attn_by_inverse_layer_idx", false))
    c.bad("scale_attn_by_inverse_layer_idx", "scores scaled by 1/sqrt(head_dim) only");
  const int64_t V = c.integer("vocab_size"), C = c.integer("n_embd"), L = c.integer("n_layer");
  const int64_t H = c.integer("n_head"), P = c.integer("n_positions");
  const Env env = m->env(P);
  const float range = static_cast<float>(c.number("initializer_range", 0.02));
  const float eps = static_cast<float>(c.number("layer_norm_epsilon", 1e-5));

  BlockSpec b;
  b.norm = NormKind::layer;
  b.eps = eps;
  b.norm1 = "ln_1.weight", b.norm1_bias = "ln_1.bias", b.norm2 = "ln_2.weight", b.norm2_bias = "ln_2.bias";
  AttentionSpec& a = b.attention;
  a.hidden = C, a.heads = H, a.kv_heads = H, a.head_dim = C / H;
  a.fused_qkv = true, a.qkv = "attn.c_attn.weight", a.qkv_bias = "attn.c_attn.bias";
  a.out = "attn.c_proj.weight", a.out_bias = "attn.c_proj.bias";
  a.file_transposed = true;
  // GPT-2's residual projections start smaller: N(0, range/√(2·layers)).
  a.init = normal(range), a.out_init = normal(range / std::sqrt(2.0f * static_cast<float>(L)));
  MlpSpec& f = b.mlp;
  f.hidden = C, f.inner = c.integer("n_inner", 4 * C), f.gated = false, f.act = Activation::gelu_tanh;
  f.fc = "mlp.c_fc.weight", f.fc_bias = "mlp.c_fc.bias", f.proj = "mlp.c_proj.weight", f.proj_bias = "mlp.c_proj.bias";
  f.file_transposed = true;
  f.init = a.init, f.out_init = a.out_init;

  m->add<TokenEmbedding>(env, "transformer", V, C, Name("wte.weight"), normal(range), Name("wpe.weight"), P);
  for (int64_t i = 0; i < L; ++i) m->add<DecoderBlock>(env, "transformer.h." + std::to_string(i), b);
  const bool tied = c.boolean("tie_word_embeddings", true);
  m->add<LmHead>(env, "lm_head", C, V, NormKind::layer, eps, Name("ln_f.weight", "transformer.ln_f.weight"),
                 Name("ln_f.bias", "transformer.ln_f.bias"), Name("weight"), normal(range),
                 tied ? "transformer.wte.weight" : "");
  m->data_from(V);
  return m;
}

}  // namespace

DSCPP_EXPORT_MODEL("gpt2", make)
