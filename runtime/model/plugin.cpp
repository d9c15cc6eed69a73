#include "runtime/model/plugin.h"

#include "core/error.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

namespace dscpp::runtime {

dscpp_param_role role_from_name(const std::string& full_name) {
  std::string name = full_name;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t begin = 0;
  while (begin <= name.size()) {
    size_t end = name.find('.', begin);
    if (end == std::string::npos) end = name.size();
    const std::string_view part(name.data() + begin, end - begin);
    const bool norm = part == "norm" || part.find("layernorm") != std::string_view::npos ||
                      part.find("rmsnorm") != std::string_view::npos ||
                      (part.size() > 5 && part.substr(part.size() - 5) == "_norm") || part.substr(0, 3) == "ln_";
    if (norm) return DSCPP_ROLE_NORM;
    begin = end + 1;
  }
  return name.find("bias") != std::string::npos ? DSCPP_ROLE_BIAS : DSCPP_ROLE_WEIGHT;
}

const char* role_name(dscpp_param_role role) {
  switch (role) {
    case DSCPP_ROLE_BIAS: return "bias";
    case DSCPP_ROLE_NORM: return "norm";
    case DSCPP_ROLE_EMBEDDING: return "embedding";
    default: return "weight";
  }
}

DType dtype_of(dscpp_dtype d) {
  switch (d) {
    case DSCPP_F32: return DType::f32;
    case DSCPP_F16: return DType::f16;
    case DSCPP_BF16: return DType::bf16;
    case DSCPP_I32: return DType::i32;
  }
  fail("dscpp_dtype {} is not a dtype of the plugin ABI", static_cast<int>(d));
}

dscpp_dtype abi_dtype(DType d) {
  if (d == DType::f32) return DSCPP_F32;
  if (d == DType::f16) return DSCPP_F16;
  if (d == DType::bf16) return DSCPP_BF16;
  fail("{} is not a compute dtype of the plugin ABI", dtype_name(d));
}

const char* status_name(int code) {
  switch (code) {
    case DSCPP_OK:
      return "ok";
    case DSCPP_E_INVALID_ARGUMENT:
      return "invalid argument";
    case DSCPP_E_IO:
      return "I/O error";
    case DSCPP_E_UNSUPPORTED:
      return "unsupported";
    case DSCPP_E_NUMERIC:
      return "numeric error";
    case DSCPP_E_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

namespace {

void check_size(const std::string& path, const char* what, uint32_t plugin, size_t ours) {
  if (plugin != ours)
    fail("{}: the plugin's {} is {} bytes but this runtime's is {}: it was built against a different "
         "include/dscpp/model.h; rebuild it against this dscpp",
         path, what, plugin, ours);
}

std::string message_of(const dscpp_error& err) {
  size_t n = strnlen(err.message, sizeof(err.message));
  return n ? std::string(err.message, n) : std::string("(the plugin gave no message)");
}

}  // namespace

Plugin::Plugin(const std::string& path) : path_(path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) fail("cannot load model plugin {}: {}", path, dlerror());
  auto entry = reinterpret_cast<dscpp_model_entry_fn>(dlsym(handle_, DSCPP_MODEL_ENTRY_SYMBOL));
  if (!entry)
    fail("{} is not a dscpp model plugin: it does not export `{}` (declare it extern \"C\" and return a "
         "dscpp_model_api; see include/dscpp/model.h)",
         path, DSCPP_MODEL_ENTRY_SYMBOL);
  api_ = entry();
  if (!api_) fail("{}: {}() returned NULL", path, DSCPP_MODEL_ENTRY_SYMBOL);
  if (api_->abi_version != DSCPP_MODEL_ABI_VERSION)
    fail("{} was built for dscpp model ABI version {}, but this runtime implements version {}; rebuild the "
         "plugin against this dscpp's include/dscpp/model.h",
         path, api_->abi_version, DSCPP_MODEL_ABI_VERSION);
  check_size(path, "dscpp_model_api", api_->api_size, sizeof(dscpp_model_api));
  check_size(path, "dscpp_ops", api_->ops_size, sizeof(dscpp_ops));
  check_size(path, "dscpp_layer_ctx", api_->layer_ctx_size, sizeof(dscpp_layer_ctx));
  check_size(path, "dscpp_layer_desc", api_->layer_desc_size, sizeof(dscpp_layer_desc));
  check_size(path, "dscpp_param_desc", api_->param_desc_size, sizeof(dscpp_param_desc));
  check_size(path, "dscpp_host_info", api_->host_info_size, sizeof(dscpp_host_info));
  const char* missing = !api_->create        ? "create"
                        : !api_->destroy     ? "destroy"
                        : !api_->describe    ? "describe"
                        : !api_->layer       ? "layer"
                        : !api_->forward     ? "forward"
                        : !api_->backward    ? "backward"
                        : !api_->load_sample ? "load_sample"
                                             : nullptr;
  if (missing) fail("{}: the plugin's dscpp_model_api has no `{}` function", path, missing);
}

Plugin::~Plugin() {
  if (model_) api_->destroy(model_);
  // The plugin stays mapped: thread-local destructors or atexit handlers it registered may
  // still run after us.
}

void Plugin::failed(const std::string& what, int code, const dscpp_error& err) const {
  fail("model plugin {}: {} failed ({}, code {}): {}", name(), what, status_name(code), code, message_of(err));
}

void Plugin::create(const std::vector<std::string>& args, const dscpp_host_info& host) {
  std::vector<const char*> argv{path_.c_str()};
  for (const auto& a : args) argv.push_back(a.c_str());
  dscpp_error err{};
  int rc = api_->create(static_cast<int>(argv.size()), argv.data(), &host, &model_, &err);
  if (rc != DSCPP_OK) failed("create", rc, err);
  if (!model_) fail("model plugin {}: create returned no model", name());

  dscpp_model_desc desc{};
  if ((rc = api_->describe(model_, &desc, &err)) != DSCPP_OK) failed("describe", rc, err);
  if (desc.num_layers < 1)
    fail("model plugin {}: describe says it has {} layers (need at least 1)", name(), desc.num_layers);
  data_ = desc.data;
  if (data_.train_size < 0 || data_.eval_size < 0)
    fail("model plugin {}: describe gives {} train and {} eval samples", name(), data_.train_size, data_.eval_size);
  if (data_.input_dtype != DSCPP_F32 && data_.input_dtype != DSCPP_I32)
    fail("model plugin {}: input dtype must be DSCPP_F32 or DSCPP_I32", name());
  if (data_.target_dtype != DSCPP_I32) fail("model plugin {}: target dtype must be DSCPP_I32", name());

  if (desc.init_from != nullptr) init_from_ = desc.init_from;
  init_partial_ = desc.init_partial != 0;
  if (desc.export_config != nullptr) export_config_ = desc.export_config;
  if (desc.adapter_from != nullptr) adapter_from_ = desc.adapter_from;
  if (desc.adapter_config != nullptr) adapter_config_ = desc.adapter_config;
  for (const char* const* a = desc.weight_aliases; a != nullptr && a[0] != nullptr; a += 2) {
    if (a[1] == nullptr) fail("model plugin {}: weight alias '{}' names no parameter", name(), a[0]);
    aliases_[a[0]] = a[1];
  }
  encoder_ = EncoderDecl{desc.encoder_layers, desc.encoder_len, desc.encoder_width, desc.decoder_start_id,
                         desc.eos_id, desc.pad_id};
  if (encoder_.layers < 0 || encoder_.layers >= desc.num_layers)
    fail("model plugin {}: describe says {} of its {} layers are an encoder", name(), encoder_.layers,
         desc.num_layers);
  if (encoder_.layers > 0 && (encoder_.len <= 0 || encoder_.width <= 0 || data_.input_dtype != DSCPP_I32 ||
                              data_.input_numel < encoder_.len + 1 || encoder_.decoder_start_id < 0))
    fail("model plugin {}: an encoder-decoder needs a source length and width, a decoder start id, and int32 samples "
         "of at least source length + 1 ints (it says {} × {}, start id {}, {} ints)",
         name(), encoder_.len, encoder_.width, encoder_.decoder_start_id, data_.input_numel);

  std::set<std::string> layer_names, param_names;
  struct Owner {
    int layer, param;
  };
  std::map<std::string, Owner> owners;  // full name → where it is declared
  for (int32_t i = 0; i < desc.num_layers; ++i) {
    dscpp_layer_desc ld{};
    if ((rc = api_->layer(model_, i, &ld, &err)) != DSCPP_OK) failed(fmt::format("layer({})", i), rc, err);
    LayerDecl layer;
    layer.name = ld.name ? ld.name : fmt::format("layer{}", i);
    if (!layer_names.insert(layer.name).second) fail("model plugin {}: two layers are named '{}'", name(), layer.name);
    if (ld.output_numel <= 0 || ld.saved_bytes < 0 || ld.workspace_bytes < 0)
      fail("model plugin {}: layer '{}' declares output_numel {}, saved_bytes {}, workspace_bytes {}", name(),
           layer.name, ld.output_numel, ld.saved_bytes, ld.workspace_bytes);
    layer.output_numel = ld.output_numel;
    layer.saved_bytes = ld.saved_bytes;
    layer.workspace_bytes = ld.workspace_bytes;
    if (ld.decode_cache_bytes < 0 || ld.decode_workspace_bytes < 0 || ld.decode_output_numel < 0)
      fail("model plugin {}: layer '{}' declares negative decode sizes", name(), layer.name);
    layer.decode_cache_bytes = ld.decode_cache_bytes;
    layer.decode_workspace_bytes = ld.decode_workspace_bytes;
    layer.decode_output_numel = ld.decode_output_numel;
    layer.num_slots = ld.num_params;
    for (int32_t p = 0; p < ld.num_params; ++p) {
      const dscpp_param_desc& pd = ld.params[p];
      ParamDecl param;
      param.name = pd.full_name != nullptr ? std::string(pd.full_name)
                                           : layer.name + "." + (pd.name ? pd.name : fmt::format("p{}", p));
      if (param.name.empty())
        fail("model plugin {}: layer '{}' parameter {} has an empty full_name", name(), layer.name, p);
      if (pd.ndim < 1 || pd.ndim > DSCPP_MAX_DIMS)
        fail("model plugin {}: parameter '{}' has ndim {} (expected 1..{})", name(), param.name, pd.ndim,
             DSCPP_MAX_DIMS);
      param.numel = 1;
      for (int d = 0; d < pd.ndim; ++d) {
        if (pd.shape[d] <= 0)
          fail("model plugin {}: parameter '{}' has dimension {} = {}", name(), param.name, d, pd.shape[d]);
        param.shape.push_back(pd.shape[d]);
        param.numel *= pd.shape[d];
      }
      param.init = pd.init;
      param.init_a = pd.init_a;
      param.slot = p;
      param.file_transposed = pd.file_transposed != 0;
      if (param.file_transposed && pd.ndim != 2)
        fail("model plugin {}: parameter '{}' is file_transposed but has {} dimensions (only a matrix can be)", name(),
             param.name, pd.ndim);
      if (pd.role < DSCPP_ROLE_UNSPECIFIED || pd.role > DSCPP_ROLE_EMBEDDING)
        fail("model plugin {}: parameter '{}' declares role {} (dscpp_param_role is 0..{})", name(), param.name,
             pd.role, static_cast<int>(DSCPP_ROLE_EMBEDDING));
      param.role =
          pd.role == DSCPP_ROLE_UNSPECIFIED ? role_from_name(param.name) : static_cast<dscpp_param_role>(pd.role);
      param.frozen = pd.frozen != 0;
      param.adapter = pd.adapter != 0;
      if (!param_names.insert(param.name).second)
        fail("model plugin {}: two parameters are named '{}'", name(), param.name);
      if (pd.tied_to != nullptr) {
        auto owner = owners.find(pd.tied_to);
        if (owner == owners.end())
          fail("model plugin {}: parameter '{}' is tied to '{}', which no earlier layer declares", name(), param.name,
               pd.tied_to);
        const ParamDecl& o =
            layers_[static_cast<size_t>(owner->second.layer)].params[static_cast<size_t>(owner->second.param)];
        if (o.shape != param.shape)
          fail("model plugin {}: parameter '{}' is tied to '{}' but declares shape [{}] where the owner has [{}]",
               name(), param.name, pd.tied_to, fmt::join(param.shape, ", "), fmt::join(o.shape, ", "));
        layer.tied.push_back(TiedParam{param.name, p, owner->second.layer, owner->second.param, param.numel});
        continue;
      }
      owners[param.name] = Owner{i, static_cast<int>(layer.params.size())};
      if (param.file_transposed) file_transposed_.insert(param.name);
      layer.params.push_back(std::move(param));
    }
    layers_.push_back(std::move(layer));
  }
}

std::map<std::string, std::string> Plugin::tied_names() const {
  std::map<std::string, std::string> tied = aliases_;
  for (const LayerDecl& l : layers_)
    for (const TiedParam& t : l.tied)
      tied[t.name] = layers_.at(static_cast<size_t>(t.owner_layer)).params.at(static_cast<size_t>(t.owner_param)).name;
  return tied;
}

void Plugin::forward(int layer, const dscpp_layer_ctx& ctx) const {
  dscpp_error err{};
  int rc = api_->forward(model_, layer, &ctx, &err);
  if (rc != DSCPP_OK) failed(fmt::format("forward of layer '{}'", layers_[layer].name), rc, err);
}

void Plugin::backward(int layer, const dscpp_layer_ctx& ctx) const {
  dscpp_error err{};
  int rc = api_->backward(model_, layer, &ctx, &err);
  if (rc != DSCPP_OK) failed(fmt::format("backward of layer '{}'", layers_[layer].name), rc, err);
}

bool Plugin::can_decode() const {
  if (api_->decode == nullptr) return false;
  for (size_t l = size_t(encoder_.layers); l < layers_.size(); ++l)
    if (layers_[l].decode_output_numel <= 0) return false;
  return true;
}

void Plugin::decode(int layer, const dscpp_decode_ctx& ctx) const {
  dscpp_error err{};
  int rc = api_->decode(model_, layer, &ctx, &err);
  if (rc != DSCPP_OK)
    failed(fmt::format("decode of layer '{}' at position {}", layers_[layer].name, ctx.position), rc, err);
}

void Plugin::load_sample(int split, int64_t index, void* input, int32_t* target) const {
  dscpp_error err{};
  int rc = api_->load_sample(model_, split, index, input, target, &err);
  if (rc != DSCPP_OK) failed(fmt::format("load_sample({} split, index {})", split ? "eval" : "train", index), rc, err);
}

StreamLengths Plugin::batch_lengths(const void* inputs, const int32_t* targets, int64_t batch) const {
  StreamLengths n{};
  if (!api_->batch_lengths) return n;
  dscpp_error err{};
  int rc = api_->batch_lengths(model_, inputs, targets, batch, n.data(), &err);
  if (rc != DSCPP_OK) failed(fmt::format("batch_lengths of {} samples", batch), rc, err);
  for (int64_t v : n)
    if (v < 0) fail("model plugin {}: batch_lengths gave {} positions", name(), v);
  return n;
}

void Plugin::report(const dscpp_infer& infer) const {
  if (!api_->report) return;
  dscpp_error err{};
  int rc = api_->report(model_, &infer, &err);
  if (rc != DSCPP_OK) failed("report", rc, err);
}

}  // namespace dscpp::runtime
