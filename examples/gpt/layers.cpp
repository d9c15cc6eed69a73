// The layers: what each declares (parameters with their init, per-sample output, saved and
// workspace sizes) and how it runs forward and backward through the ops table. Declaration and
// code share this file because the saved/workspace buffers are indexed by the enums below,
// whose order must match the order the sizes are added in declare_layers.
#include "gpt.h"

#include <cmath>
#include <initializer_list>
#include <string>

namespace gpt {
namespace {

constexpr float kLnEps = 1e-5f;

// Indices of the block's saved tensors and workspace tensors. A block keeps 9 T×C-sized tensors
// per sample from forward to backward: qkv, the attention output, h and the pre-GELU activations.
// The two layer-norm outputs and the GELU output (6 more) are made again in backward by the ops
// that made them (same inputs, same bits): a layer norm and a GELU pass cost little next to the
// GEMMs that read them, and the activation memory falls by 40%.
enum BlockSaved { kLn1Mean, kLn1Rstd, kQkv, kLse, kAtt, kH1, kLn2Mean, kLn2Rstd, kFc };
enum BlockWork { kWDfc, kWDln, kWDh1, kWDatt, kWAttn, kWAct };
enum HeadSaved { kLnfOut, kLnfMean, kLnfRstd, kLogitProbs };
enum HeadWork { kWDlogits, kWDlnf };

void add_param(LayerInfo& L, const std::string& name, std::initializer_list<int64_t> shape, dscpp_init_kind init,
               dscpp_param_role role, float a = 0) {
  dscpp_param_desc d{};  // d.name is set once param_names stops growing
  d.role = role;
  d.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) d.shape[i++] = s;
  d.init = init;
  d.init_a = a;
  L.param_names.push_back(name);
  L.params.push_back(d);
}

}  // namespace

void declare_layers(Gpt& m) {
  const Config& cfg = m.cfg;
  const int64_t T = cfg.context;
  const int64_t C = cfg.d_model, V = m.V(), H = cfg.heads;
  const int64_t e = static_cast<int64_t>(m.elem), f = 4;
  const float std0 = 0.02f, std_res = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  m.layers.resize(cfg.layers + 2);
  {
    LayerInfo& L = m.layers[0];
    L.name = "embed";
    add_param(L, "wte.weight", {V, C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_EMBEDDING, std0);
    add_param(L, "wpe.weight", {T, C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_EMBEDDING, std0);
    L.output_numel = T * C;
  }
  for (int64_t i = 0; i < cfg.layers; ++i) {
    LayerInfo& L = m.layers[1 + i];
    L.name = "blocks." + std::to_string(i);
    add_param(L, "ln_1.weight", {C}, DSCPP_INIT_ONES, DSCPP_ROLE_NORM);
    add_param(L, "ln_1.bias", {C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_NORM);
    add_param(L, "attn.c_attn.weight", {3 * C, C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_WEIGHT, std0);
    add_param(L, "attn.c_attn.bias", {3 * C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_BIAS);
    add_param(L, "attn.c_proj.weight", {C, C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_WEIGHT, std_res);
    add_param(L, "attn.c_proj.bias", {C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_BIAS);
    add_param(L, "ln_2.weight", {C}, DSCPP_INIT_ONES, DSCPP_ROLE_NORM);
    add_param(L, "ln_2.bias", {C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_NORM);
    add_param(L, "mlp.c_fc.weight", {4 * C, C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_WEIGHT, std0);
    add_param(L, "mlp.c_fc.bias", {4 * C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_BIAS);
    add_param(L, "mlp.c_proj.weight", {C, 4 * C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_WEIGHT, std_res);
    add_param(L, "mlp.c_proj.bias", {C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_BIAS);
    L.output_numel = T * C;
    // Order must match enum BlockSaved / BlockWork.
    L.saved.add(T * f);          // ln_1 mean
    L.saved.add(T * f);          // ln_1 rstd
    L.saved.add(3 * T * C * e);  // qkv
    L.saved.add(H * T * f);      // attention log-sum-exp per query (no T² probabilities)
    L.saved.add(T * C * e);      // attention output (input of attn.c_proj)
    L.saved.add(T * C * e);      // h = x + attention (input of ln_2)
    L.saved.add(T * f);          // ln_2 mean
    L.saved.add(T * f);          // ln_2 rstd
    L.saved.add(4 * T * C * e);  // pre-GELU activations (input of the GELU and of its backward)
    L.work.add(4 * T * C * e);   // forward: the GELU output; backward: d(fc), later dqkv (d(fc) is dead by then)
    L.work.add(T * C * e);       // d(ln output)
    L.work.add(T * C * e);       // dh
    L.work.add(T * C * e);       // d(attention output)
    L.work.add(H * T * f);       // flash_attention_backward's scratch
    L.work.add(4 * T * C * e + 2 * T * f);  // an LN output or the GELU output made again (+ LN stats)
  }
  {
    LayerInfo& L = m.layers[cfg.layers + 1];
    L.name = "head";
    add_param(L, "ln_f.weight", {C}, DSCPP_INIT_ONES, DSCPP_ROLE_NORM);
    add_param(L, "ln_f.bias", {C}, DSCPP_INIT_ZEROS, DSCPP_ROLE_NORM);
    add_param(L, "lm_head.weight", {V, C}, DSCPP_INIT_NORMAL, DSCPP_ROLE_WEIGHT, std0);
    L.output_numel = T * V;
    L.saved.add(T * C * e);  // ln_f output
    L.saved.add(T * f);      // mean
    L.saved.add(T * f);      // rstd
    L.saved.add(T * V * e);  // softmax probabilities
    L.work.add(T * V * e);   // dlogits
    L.work.add(T * C * e);   // d(ln_f output)
  }
  for (LayerInfo& L : m.layers)
    for (size_t p = 0; p < L.params.size(); ++p) L.params[p].name = L.param_names[p].c_str();
}

namespace {

// ---- math helpers (all through the ops table) -------------------------------------------------
struct Ctx {
  const dscpp_ops* ops;
  size_t elem;

  // y[N,out] = x[N,in]·Wᵀ (+ b) (+ residual); gelu_out = gelu(y) when given.
  void linear_forward(const void* x, const void* W, const void* b, void* y, int64_t N, int64_t in, int64_t out,
                      const void* residual = nullptr, void* gelu_out = nullptr) const {
    op("linear_forward", ops->linear_forward, ops, x, W, b, residual, y, gelu_out, N, in, out);
  }
  // dW += dyᵀ·x, db += Σ dy, dx = dy·W (skipped when dx is null), taken through the GELU whose
  // input was gelu_pre when that is given.
  void linear_backward(const void* dy, const void* x, const void* W, void* dW, void* db, void* dx, int64_t N,
                       int64_t in, int64_t out, const void* gelu_pre = nullptr) const {
    op("linear_backward", ops->linear_backward, ops, dy, x, W, dW, db, dx, gelu_pre, N, in, out);
  }
};

const void* cp(void* p) { return p; }

void embed_forward(const Gpt* m, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const int64_t B = c->batch, T = m->T(), C = m->C();
  const int32_t* ids = static_cast<const int32_t*>(c->input);
  op("embedding_forward", ops->embedding_forward, ops, ids, c->params[0], c->output, B * T, m->V(), C);
  // wpe acts as a bias of length T·C over the batch's B rows.
  op("bias_add", ops->bias_add, ops, c->output, c->params[1], B, T * C);
}

void embed_backward(const Gpt* m, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const int64_t B = c->batch, T = m->T(), C = m->C();
  const int32_t* ids = static_cast<const int32_t*>(c->input);
  op("embedding_backward", ops->embedding_backward, ops, ids, c->grad_output, c->grads[0], B * T, m->V(), C);
  op("bias_grad", ops->bias_grad, ops, c->grad_output, c->grads[1], B, T * C);
}

// The block's two layer norms, into `out` with the statistics into mean/rstd: in forward the
// saved statistics, in backward (making an output again) scratch, with the same values.
void block_layernorm(const dscpp_ops* ops, const void* x, const void* const* p, int first_param, void* out,
                     float* mean, float* rstd, int64_t N, int64_t C) {
  op("layernorm_forward", ops->layernorm_forward, ops, x, p[first_param], p[first_param + 1], out, mean, rstd, N, C,
     kLnEps);
}

void block_forward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), H = m->H(), hd = C / H, N = B * T;
  const void* const* p = c->params;
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  auto W = [&](int i) { return L.work.at(c->workspace, i, B); };
  void* ln = W(kWAct);     // ln_1, then ln_2 output (not kept)
  void* gelu = W(kWDfc);   // GELU output (not kept)
  void* qkv = S(kQkv);
  void* att = S(kAtt);
  void* h1 = S(kH1);
  void* fc = S(kFc);

  // Attention half.
  block_layernorm(ops, c->input, p, 0, ln, static_cast<float*>(S(kLn1Mean)), static_cast<float*>(S(kLn1Rstd)), N, C);
  k.linear_forward(ln, p[2], p[3], qkv, N, C, 3 * C);
  op("flash_attention_forward", ops->flash_attention_forward, ops, cp(qkv), static_cast<float*>(S(kLse)), att, B, T,
     H, hd, 1.0f / std::sqrt(static_cast<float>(hd)));
  k.linear_forward(att, p[4], p[5], h1, N, C, C, c->input);  // h = x + proj(att)

  // MLP half.
  block_layernorm(ops, h1, p, 6, ln, static_cast<float*>(S(kLn2Mean)), static_cast<float*>(S(kLn2Rstd)), N, C);
  k.linear_forward(ln, p[8], p[9], fc, N, C, 4 * C, nullptr, gelu);
  k.linear_forward(gelu, p[10], p[11], c->output, N, 4 * C, C, h1);  // y = h + proj(gelu)
}

void block_backward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), H = m->H(), hd = C / H, N = B * T;
  const void* const* p = c->params;
  void* const* g = c->grads;
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  auto W = [&](int i) { return L.work.at(c->workspace, i, B); };
  const void* dy = c->grad_output;
  void* dfc = W(kWDfc);
  void* dln = W(kWDln);
  void* dh = W(kWDh1);
  void* datt = W(kWDatt);
  void* dqkv = dfc;  // the MLP half's backward is done with d(fc)
  void* act = W(kWAct);  // the GELU output, then an LN output, made again
  float* stats = reinterpret_cast<float*>(static_cast<char*>(act) + 4 * N * C * static_cast<int64_t>(m->elem));
  const void* qkv = S(kQkv);
  const float* lse = static_cast<const float*>(S(kLse));

  // MLP half: y = h + c_proj(gelu(c_fc(ln_2(h)))).
  op("gelu_forward", ops->gelu_forward, ops, cp(S(kFc)), act, N * 4 * C);
  k.linear_backward(dy, act, p[10], g[10], g[11], dfc, N, 4 * C, C, S(kFc));  // dfc through the GELU
  block_layernorm(ops, S(kH1), p, 6, act, stats, stats + N, N, C);
  k.linear_backward(dfc, act, p[8], g[8], g[9], dln, N, C, 4 * C);
  op("layernorm_backward", ops->layernorm_backward, ops, cp(dln), cp(S(kH1)), p[6],
     static_cast<const float*>(S(kLn2Mean)), static_cast<const float*>(S(kLn2Rstd)), dh, g[6], g[7], N, C);
  op("axpy", ops->axpy, ops, 1.0f, dy, dh, N * C);  // residual

  // Attention half: h = x + c_proj(attention(c_attn(ln_1(x)))).
  k.linear_backward(dh, S(kAtt), p[4], g[4], g[5], datt, N, C, C);
  op("flash_attention_backward", ops->flash_attention_backward, ops, qkv, cp(S(kAtt)), lse, cp(datt), dqkv,
     static_cast<float*>(W(kWAttn)), B, T, H, hd, 1.0f / std::sqrt(static_cast<float>(hd)));
  block_layernorm(ops, c->input, p, 0, act, stats, stats + N, N, C);
  k.linear_backward(dqkv, act, p[2], g[2], g[3], dln, N, C, 3 * C);
  if (c->grad_input != nullptr) {
    op("layernorm_backward", ops->layernorm_backward, ops, cp(dln), c->input, p[0],
       static_cast<const float*>(S(kLn1Mean)), static_cast<const float*>(S(kLn1Rstd)), c->grad_input, g[0], g[1], N,
       C);
    op("axpy", ops->axpy, ops, 1.0f, cp(dh), c->grad_input, N * C);  // residual
  } else {
    // Still owe ln_1's parameter gradients; dx goes to scratch (datt is free now).
    op("layernorm_backward", ops->layernorm_backward, ops, cp(dln), c->input, p[0],
       static_cast<const float*>(S(kLn1Mean)), static_cast<const float*>(S(kLn1Rstd)), datt, g[0], g[1], N, C);
  }
}

void head_forward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), V = m->V(), N = B * T;
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  op("layernorm_forward", ops->layernorm_forward, ops, c->input, c->params[0], c->params[1], S(kLnfOut),
     static_cast<float*>(S(kLnfMean)), static_cast<float*>(S(kLnfRstd)), N, C, kLnEps);
  k.linear_forward(S(kLnfOut), c->params[2], nullptr, c->output, N, C, V);
  if (c->target == nullptr) return;  // predicting only
  double loss_sum = 0;
  int64_t counted = 0, correct = 0;
  op("cross_entropy_forward", ops->cross_entropy_forward, ops, cp(c->output), c->target, S(kLogitProbs), N, V,
     &loss_sum, &counted, &correct);
  if (c->metrics != nullptr) {
    c->metrics->loss_sum += loss_sum;
    c->metrics->counted += counted;
    c->metrics->correct += correct;
  }
}

void head_backward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), V = m->V(), N = B * T;
  if (c->target == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "gpt: head backward without targets");
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  void* dlogits = L.work.at(c->workspace, kWDlogits, B);
  void* dlnf = L.work.at(c->workspace, kWDlnf, B);
  // The objective is the mean over all B·T positions (every target is a real token).
  op("cross_entropy_backward", ops->cross_entropy_backward, ops, cp(S(kLogitProbs)), c->target, dlogits, N, V,
     c->loss_grad / static_cast<float>(N));
  k.linear_backward(dlogits, S(kLnfOut), c->params[2], c->grads[2], nullptr, dlnf, N, C, V);
  if (c->grad_input == nullptr)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: head backward without grad_input (it is never layer 0)");
  op("layernorm_backward", ops->layernorm_backward, ops, cp(dlnf), c->input, c->params[0],
     static_cast<const float*>(S(kLnfMean)), static_cast<const float*>(S(kLnfRstd)), c->grad_input, c->grads[0],
     c->grads[1], N, C);
}

}  // namespace

void layer_forward(const Gpt* m, int32_t layer, const dscpp_layer_ctx* ctx) {
  const LayerInfo& L = layer_at(m, layer);
  if (layer == 0) embed_forward(m, ctx);
  else if (layer + 1 == static_cast<int32_t>(m->layers.size())) head_forward(m, L, ctx);
  else block_forward(m, L, ctx);
}

void layer_backward(const Gpt* m, int32_t layer, const dscpp_layer_ctx* ctx) {
  const LayerInfo& L = layer_at(m, layer);
  if (layer == 0) embed_backward(m, ctx);
  else if (layer + 1 == static_cast<int32_t>(m->layers.size())) head_backward(m, L, ctx);
  else block_backward(m, L, ctx);
}

}  // namespace gpt
