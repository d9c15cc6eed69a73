// Loading a model plugin (include/dscpp/model.h) and calling it with errors turned into
// dscpp::Error messages that name the plugin, the layer and the call.
#pragma once

#include "core/dtype.h"
#include "dscpp/model.h"

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dscpp::runtime {

// dscpp_layer_ctx::stream_len: positions per sample of each stream a micro-batch uses (0: all).
using StreamLengths = std::array<int64_t, 2>;

// The ABI's floating dtypes as the runtime's (DSCPP_I32 → i32).
DType dtype_of(dscpp_dtype d);
dscpp_dtype abi_dtype(DType d);  // f32, f16 or bf16; throws for another

struct ParamDecl {
  std::string name;  // full name: "<layer>.<param>", or the plugin's full_name
  std::vector<int64_t> shape;
  int64_t numel = 0;
  dscpp_init_kind init = DSCPP_INIT_ZEROS;
  float init_a = 0;
  int slot = 0;                  // its index in the plugin's parameter list of the layer (ctx.params[slot])
  bool file_transposed = false;  // weight files hold it as [shape[1], shape[0]]
  dscpp_param_role role = DSCPP_ROLE_WEIGHT;  // never UNSPECIFIED: the loader classifies by name
  bool frozen = false;   // not trained (the model's requires_grad=False, or --freeze / --train_only)
  bool adapter = false;  // an adapter parameter (LoRA): read from adapter_from, not init_from
};

// A role from the parameter's full name, as transformers tells biases and norms apart: "bias"
// anywhere; "norm" as a name component, or "layernorm" / "rmsnorm" / "_norm" / GPT-2's "ln_"
// within one; else a weight.
dscpp_param_role role_from_name(const std::string& full_name);
const char* role_name(dscpp_param_role role);  // "weight", "bias", "norm", "embedding"

// A parameter a layer uses but an earlier layer owns (dscpp_param_desc::tied_to). It is not one
// of the model's parameters (no storage, optimizer state or checkpoint entry of its own).
struct TiedParam {
  std::string name;       // the using layer's name for it ("<layer>.<param>" or its full_name)
  int slot = 0;           // ctx.params[slot] of the using layer
  int owner_layer = 0;    // the owner, an earlier layer
  int owner_param = 0;    // index into the owner's LayerDecl::params
  int64_t numel = 0;
};

struct LayerDecl {
  std::string name;
  std::vector<ParamDecl> params;  // the layer's own parameters
  std::vector<TiedParam> tied;    // parameters it shares with earlier layers
  int num_slots = 0;              // params.size() + tied.size(): the plugin's parameter count
  int64_t output_numel = 0;
  int64_t saved_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t decode_cache_bytes = 0, decode_workspace_bytes = 0, decode_output_numel = 0;  // generation
};

// An encoder-decoder's description (model.h's dscpp_model_desc, ABI 8): layers [0, layers) are its
// encoder, whose last output is `len` × `width` per sample.
struct EncoderDecl {
  int layers = 0;  // 0: a decoder only
  int64_t len = 0, width = 0;
  int32_t decoder_start_id = -1, eos_id = -1, pad_id = -1;
};

class Plugin {
 public:
  // dlopen + entry point + ABI checks; throws dscpp::Error naming the file and the mismatch.
  explicit Plugin(const std::string& path);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // Creates the model and reads its description (layers, parameters, data).
  void create(const std::vector<std::string>& args, const dscpp_host_info& host);

  const std::string& path() const { return path_; }
  std::string name() const { return api_->name ? api_->name : path_; }
  const std::vector<LayerDecl>& layers() const { return layers_; }
  const dscpp_data_desc& data() const { return data_; }
  // What the model asks to start from (model.h's init_from; "" = nothing) and whether a partial
  // match is accepted; the JSON it wants saved beside checkpoints ("" = none).
  const std::string& init_from() const { return init_from_; }
  bool init_partial() const { return init_partial_; }
  const std::string& export_config() const { return export_config_; }
  // The adapter parameters' initial weights (PEFT's adapter_model.safetensors; "" = their init)
  // and the adapter_config.json to save beside checkpoints ("" = none).
  const std::string& adapter_from() const { return adapter_from_; }
  const std::string& adapter_config() const { return adapter_config_; }
  // Freezes more parameters by name (runtime/model/frozen_params.h applies --freeze / --train_only).
  void set_frozen(int layer, int param, bool frozen) {
    layers_[static_cast<size_t>(layer)].params[static_cast<size_t>(param)].frozen = frozen;
  }
  const EncoderDecl& encoder() const { return encoder_; }
  // The parameters weight files hold transposed (ParamDecl::file_transposed), by full name.
  const std::set<std::string>& file_transposed() const { return file_transposed_; }
  // A shared parameter's other names → its owner's full name (lm_head.weight → the embedding's).
  // With the model's weight aliases (model.h's weight_aliases), which files may hold instead.
  std::map<std::string, std::string> tied_names() const;
  bool has_report() const { return api_->report != nullptr; }

  void forward(int layer, const dscpp_layer_ctx& ctx) const;
  void backward(int layer, const dscpp_layer_ctx& ctx) const;
  void load_sample(int split, int64_t index, void* input, int32_t* target) const;
  // The positions of each stream a micro-batch of host samples needs (model.h's batch_lengths),
  // checked against the maxima; {0, 0} (all) for a model without the entry.
  StreamLengths batch_lengths(const void* inputs, const int32_t* targets, int64_t batch) const;
  // Generation (model.h's decode): whether every layer after the encoder decodes, and one layer's call.
  bool can_decode() const;
  void decode(int layer, const dscpp_decode_ctx& ctx) const;
  void report(const dscpp_infer& infer) const;

 private:
  [[noreturn]] void failed(const std::string& what, int code, const dscpp_error& err) const;

  std::string path_;
  void* handle_ = nullptr;
  const dscpp_model_api* api_ = nullptr;
  void* model_ = nullptr;
  std::vector<LayerDecl> layers_;
  dscpp_data_desc data_{};
  std::string init_from_, export_config_, adapter_from_, adapter_config_;
  std::set<std::string> file_transposed_;
  bool init_partial_ = false;
  EncoderDecl encoder_;
  std::map<std::string, std::string> aliases_;  // alias → owner's full name
};

const char* status_name(int code);

}  // namespace dscpp::runtime
