// Declarations shared by the gpt plugin's sources (private to examples/gpt; the plugin still sees
// only include/): the model object and its layer tables, the buffer layout the layer code indexes,
// the error path, and the one function each source file offers the others.
#pragma once

#include "dscpp/model.h"
#include "token_file.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

// ---- errors -------------------------------------------------------------------------------
// Thrown anywhere inside an entry point; guarded() (gpt.cpp) turns it into a status and message.
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] inline void fail(int code, std::string message) { throw Failure{code, std::move(message)}; }

// Calls one entry of the ops table and names it when it fails.
template <class Fn, class... Args>
void op(const char* name, Fn fn, const dscpp_ops* ops, Args... args) {
  if (fn == nullptr) fail(DSCPP_E_UNSUPPORTED, std::string("ops table has no ") + name);
  int status = fn(ops, args...);
  if (status != DSCPP_OK) fail(status, std::string("op ") + name + " failed with status " + std::to_string(status));
}

// ---- buffer layout ----------------------------------------------------------------------------
// A layer's saved/workspace buffer holds `batch` samples' worth of several tensors. We lay it
// out tensor-major (all samples of tensor 0, then all of tensor 1, …) so each tensor is one
// contiguous [batch·rows, cols] matrix; each per-sample size is rounded up to 64 bytes so every
// tensor starts aligned.
struct Layout {
  std::vector<int64_t> bytes;  // per sample, rounded
  int add(int64_t b) {
    bytes.push_back((b + 63) / 64 * 64);
    return static_cast<int>(bytes.size()) - 1;
  }
  int64_t total() const {
    int64_t t = 0;
    for (int64_t b : bytes) t += b;
    return t;
  }
  void* at(void* base, int k, int64_t batch) const {
    int64_t off = 0;
    for (int i = 0; i < k; ++i) off += bytes[i];
    return static_cast<char*>(base) + off * batch;
  }
};

// ---- the model ----------------------------------------------------------------------------
struct Config {
  std::string data;
  std::string tokens;       // a token file (examples/common/token_file.h) instead of text
  int64_t vocab_size = 0;   // with --tokens: the vocabulary (every token below it)
  int64_t token_bytes = 2;  // with --tokens: 2 or 4, for a file without an llm.c header
  int64_t layers = 4, d_model = 256, heads = 4, context = 128, sample_chars = 200;
  double temperature = 0;
};

struct LayerInfo {
  std::string name;
  std::vector<std::string> param_names;  // storage for dscpp_param_desc::name
  std::vector<dscpp_param_desc> params;
  int64_t output_numel = 0;
  Layout saved, work;
};

struct Gpt {
  Config cfg;
  std::vector<uint8_t> text;
  std::vector<uint8_t> vocab;  // id → byte (text data)
  std::unique_ptr<examples::TokenFile> tokens;  // token data: ids as they are
  int32_t byte_to_id[256];
  int64_t windows = 0, train_windows = 0;
  size_t elem = 4;
  std::vector<LayerInfo> layers;
  dscpp_host_info host{};

  int64_t C() const { return cfg.d_model; }
  int64_t T() const { return cfg.context; }
  int64_t H() const { return cfg.heads; }
  int64_t V() const { return tokens ? cfg.vocab_size : static_cast<int64_t>(vocab.size()); }
  void log(const std::string& line) const {
    if (host.log != nullptr) host.log(host.runtime, line.c_str());
  }
};

// ---- what each source file offers the others ----------------------------------------------------
// model.cpp: the plugin arguments → a model with its text and layers; bounds-checked layer lookup.
Gpt* create_model(int argc, const char* const* argv, const dscpp_host_info* host);
const LayerInfo& layer_at(const Gpt* m, int32_t index);

// data.cpp: reads the text into m.text and fills the vocabulary and window counts (needs m.cfg
// and m.host); one sample of a split as token ids.
void load_text(Gpt& m);
void load_sample(const Gpt* m, int32_t split, int64_t index, void* input, int32_t* target);

// layers.cpp: fills m.layers with embed, the blocks and head (needs the vocabulary); runs one
// layer's forward or backward through ctx->ops.
void declare_layers(Gpt& m);
void layer_forward(const Gpt* m, int32_t layer, const dscpp_layer_ctx* ctx);
void layer_backward(const Gpt* m, int32_t layer, const dscpp_layer_ctx* ctx);

// report.cpp: generates text through the runtime's lent forward pass and logs it.
void report(const Gpt* m, const dscpp_infer* infer);

}  // namespace gpt
