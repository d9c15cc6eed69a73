// Example model plugin: a small character-level GPT-2-style language model.
//
// Written only against the plugin ABI (include/dscpp/model.h) and libc/libstdc++, so the
// directory can be copied out of the tree and built on its own:
//   c++ -std=c++20 -O2 -shared -fPIC -fvisibility=hidden -I<dscpp>/include *.cpp -o libgpt.so
// (-fvisibility=hidden, as in the meson build, keeps namespace gpt's functions out of the dynamic
// symbol table; the runtime looks up only dscpp_model_entry.)
//
// This file: the specification below and the C entry points, which turn exceptions into status
// codes. The rest: gpt.h (shared declarations), model.cpp (arguments, creation), data.cpp (text,
// vocabulary, windows), layers.cpp (layer declarations and their forward/backward), report.cpp
// (generated text).
//
// Layers (C = d_model, T = context, V = vocabulary, H = heads, hd = C/H):
//   "embed"     wte.weight [V,C], wpe.weight [T,C]: x = wte[id] + wpe[t]
//   "blocks.i"  pre-LN transformer block, i = 0 … layers−1:
//                 h = x + attn.c_proj(causal_self_attention(attn.c_attn(ln_1(x))))
//                 y = h + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(h))))
//               params ln_1.{weight,bias} [C], attn.c_attn.{weight [3C,C], bias [3C]},
//               attn.c_proj.{weight [C,C], bias [C]}, ln_2.{weight,bias} [C],
//               mlp.c_fc.{weight [4C,C], bias [4C]}, mlp.c_proj.{weight [C,4C], bias [C]}
//   "head"      ln_f.{weight,bias} [C], lm_head.weight [V,C] (no bias, no weight tying);
//               output = logits [T,V]; loss = mean cross-entropy over every position.
// Linear weights are stored [out, in] like torch.nn.Linear (y = x·Wᵀ + b); the qkv output is
// [q | k | v], each C wide with head h at columns h·hd … (h+1)·hd. Layer norms use eps 1e-5.
// Init (GPT-2): N(0, 0.02) for linears and embeddings, N(0, 0.02/√(2·layers)) for the two
// residual projections (attn.c_proj, mlp.c_proj), layer-norm weights 1, biases 0.
//
// Plugin arguments (after `--`):
//   --data FILE         text to model (default: the Debian fortunes text, see below)
//   --tokens FILE       pre-tokenized data instead (examples/common/token_file.h: llm.c's or
//                       Megatron's format, or headerless uint16/uint32) with --vocab_size N and,
//                       headerless, --token_bytes 2|4 (default 2); ids are used as they are
//   --layers N          transformer blocks (default 4)
//   --d_model N         width (default 256)
//   --heads N           attention heads, must divide d_model (default 4)
//   --context N         tokens per sample (default 128)
//   --sample_chars N    characters the report generates (default 200; 0 = no sample)
//   --temperature X     0 = greedy decoding (default); > 0 samples with a generator seeded
//                       from the run's seed
// Default text: every regular file (not a symlink) directly in /usr/share/games/fortunes
// whose name does not end in .dat or .u8, concatenated byte for byte in byte-wise sorted
// name order (bench/torch_gpt.py reads exactly the same).
// Vocabulary: the sorted set of distinct bytes of the text; token id = rank of the byte.
// Samples: non-overlapping windows of context+1 bytes, window w = text[w·(T+1), (w+1)·(T+1));
// input = its first T tokens, target = its last T. With n = ⌊len/(T+1)⌋ windows, train is
// windows [0, ⌊9n/10⌋) and eval the rest.
#include "gpt.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>

namespace gpt {
namespace {

// ---- errors -------------------------------------------------------------------------------
void set_error(dscpp_error* err, const std::string& message) {
  if (err != nullptr) std::snprintf(err->message, DSCPP_ERROR_CAP, "%s", message.c_str());
}

template <class Body>
int guarded(dscpp_error* err, Body&& body) {
  try {
    body();
    return DSCPP_OK;
  } catch (const Failure& f) {
    set_error(err, f.message);
    return f.code;
  } catch (const std::bad_alloc&) {
    set_error(err, "gpt: out of host memory");
    return DSCPP_E_INTERNAL;
  } catch (const std::exception& e) {
    set_error(err, std::string("gpt: ") + e.what());
    return DSCPP_E_INTERNAL;
  }
}

// ---- the C entry points ----------------------------------------------------------------------
int api_create(int argc, const char* const* argv, const dscpp_host_info* host, void** model, dscpp_error* err) {
  return guarded(err, [&] {
    if (model == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "gpt: create without a model pointer");
    *model = create_model(argc, argv, host);
  });
}

void api_destroy(void* model) { delete static_cast<Gpt*>(model); }

int api_describe(void* model, dscpp_model_desc* out, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    *out = dscpp_model_desc{};
    out->num_layers = static_cast<int32_t>(m->layers.size());
    out->data.train_size = m->train_windows;
    out->data.eval_size = m->windows - m->train_windows;
    out->data.input_dtype = DSCPP_I32;
    out->data.input_numel = m->T();
    out->data.target_dtype = DSCPP_I32;
    out->data.target_numel = m->T();
    out->data.tokens_per_sample = m->T();
  });
}

int api_layer(void* model, int32_t index, dscpp_layer_desc* out, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    const LayerInfo& L = layer_at(m, index);
    *out = dscpp_layer_desc{};
    out->name = L.name.c_str();
    out->num_params = static_cast<int32_t>(L.params.size());
    out->params = L.params.data();
    out->output_numel = L.output_numel;
    out->saved_bytes = L.saved.total();
    out->workspace_bytes = L.work.total();
  });
}

int api_forward(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] { layer_forward(static_cast<const Gpt*>(model), layer, ctx); });
}

int api_backward(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] { layer_backward(static_cast<const Gpt*>(model), layer, ctx); });
}

int api_load_sample(void* model, int32_t split, int64_t index, void* input, int32_t* target, dscpp_error* err) {
  return guarded(err, [&] { load_sample(static_cast<const Gpt*>(model), split, index, input, target); });
}

int api_report(void* model, const dscpp_infer* infer, dscpp_error* err) {
  return guarded(err, [&] { report(static_cast<const Gpt*>(model), infer); });
}

dscpp_model_api make_api() {
  dscpp_model_api api{};
  dscpp_model_api_stamp(&api);
  api.name = "gpt";
  api.create = api_create;
  api.destroy = api_destroy;
  api.describe = api_describe;
  api.layer = api_layer;
  api.forward = api_forward;
  api.backward = api_backward;
  api.load_sample = api_load_sample;
  api.report = api_report;
  return api;
}

}  // namespace
}  // namespace gpt

extern "C" __attribute__((visibility("default"))) const dscpp_model_api* dscpp_model_entry(void) {
  static const dscpp_model_api api = gpt::make_api();
  return &api;
}
