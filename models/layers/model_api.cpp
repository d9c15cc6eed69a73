// The layer library's plumbing: memory plans, the Layer base, and the C ABI (dscpp/model.h) a
// Model is exported through, with every exception turned into a status and its message.
#include "dscpp/layers.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

namespace dscpp::layers {

void fail(int code, const std::string& message) { throw Failure{code, message}; }

void check(int status, const char* op) {
  if (status == DSCPP_E_UNSUPPORTED)
    fail(status, std::string("the ops table cannot run ") + op + " (not in this table, or not for its dtype)");
  if (status != DSCPP_OK) fail(status, std::string("op ") + op + " failed with status " + std::to_string(status));
}

size_t dtype_bytes(dscpp_dtype d) { return d == DSCPP_F16 || d == DSCPP_BF16 ? 2 : 4; }

int Buffers::add(int64_t bytes_per_sample) {
  if (bytes_per_sample < 0) fail(DSCPP_E_INVALID_ARGUMENT, "a layer buffer of negative size");
  offset_.push_back(total_);
  total_ += (bytes_per_sample + 63) / 64 * 64;
  return static_cast<int>(offset_.size()) - 1;
}

int Buffers::add_shared(int64_t bytes_per_sample) {
  if (shared_ < 0) return shared_ = add(bytes_per_sample);
  if (bytes_per_sample < 0) fail(DSCPP_E_INVALID_ARGUMENT, "a layer buffer of negative size");
  const auto slot = static_cast<size_t>(shared_);
  const int64_t size = (slot + 1 < offset_.size() ? offset_[slot + 1] : total_) - offset_[slot];
  const int64_t grow = (bytes_per_sample + 63) / 64 * 64 - size;
  if (grow <= 0) return shared_;
  for (size_t i = slot + 1; i < offset_.size(); ++i) offset_[i] += grow;
  total_ += grow;
  return shared_;
}

void* Buffers::at(void* base, int slot, int64_t batch) const {
  return static_cast<char*>(base) + offset_.at(static_cast<size_t>(slot)) * batch;
}

void* Call::saved(int slot) const { return layer.saved.at(ctx.saved, slot, ctx.batch); }
void* Call::fwd_work(int slot) const { return layer.fwd_work.at(ctx.workspace, slot, ctx.batch); }
void* Call::bwd_work(int slot) const { return layer.bwd_work.at(ctx.workspace, slot, ctx.batch); }
const int32_t* Call::tokens(TokenPart part) const {
  if (ctx.data_input == nullptr || (part != TokenPart::ids && !layer.env().documents))
    fail(DSCPP_E_INTERNAL, "layer " + layer.name() + ": the data input holds no token " +
                               (part == TokenPart::ids ? "ids" : "positions or document starts"));
  return static_cast<const int32_t*>(ctx.data_input) + static_cast<int64_t>(part) * layer.env().context;
}

DecodeCall::DecodeCall(const dscpp_decode_ctx& c, const Layer& l) : ctx(c), layer(l), as_layer{} {
  as_layer.struct_size = sizeof(dscpp_layer_ctx);
  as_layer.ops = c.ops;
  as_layer.batch = c.batch > 0 ? c.batch : 1;
  as_layer.params = c.params;
}
Call DecodeCall::call() const {
  return Call{as_layer, layer, this};
}
void* DecodeCall::cache(int slot, int64_t i) const {
  return layer.decode_cache.at(static_cast<char*>(ctx.cache) + i * layer.decode_cache.bytes(), slot, 1);
}
void* DecodeCall::work(int slot) const {
  return layer.decode_work.at(ctx.workspace, slot, as_layer.batch);
}
void Model::describe(dscpp_model_desc* out) {
  *out = dscpp_model_desc{};
  out->num_layers = static_cast<int32_t>(layers.size());
  out->data = data;
  out->init_from = init_from.empty() ? nullptr : init_from.c_str();
  out->init_partial = init_partial ? 1 : 0;
  out->export_config = export_config.empty() ? nullptr : export_config.c_str();
  out->adapter_from = adapter_from.empty() ? nullptr : adapter_from.c_str();
  out->adapter_config = adapter_config.empty() ? nullptr : adapter_config.c_str();
  out->encoder_layers = encoder_layers;
  out->encoder_len = encoder_len;
  out->encoder_width = encoder_width;
  out->decoder_start_id = decoder_start_id;
  out->eos_id = eos_id;
  out->pad_id = pad_id;
  if (weight_aliases.empty()) return;
  alias_ptrs_.clear();
  for (const auto& [alias, owner] : weight_aliases)
    alias_ptrs_.push_back(alias.c_str()), alias_ptrs_.push_back(owner.c_str());
  alias_ptrs_.push_back(nullptr);
  out->weight_aliases = alias_ptrs_.data();
}

void Layer::decode(const DecodeCall&) {
  fail(DSCPP_E_UNSUPPORTED, "layer " + name_ + " cannot decode one token at a time");
}

Layer::Layer(const Env& env, std::string name, int64_t output_numel)
    : env_(env), name_(std::move(name)), output_numel_(output_numel) {}

int Layer::add_param(ParamSpec p) {
  if (p.name.empty()) fail(DSCPP_E_INTERNAL, "layer " + name_ + ": a parameter without a name");
  if (p.shape.empty() || p.shape.size() > DSCPP_MAX_DIMS)
    fail(DSCPP_E_INTERNAL, "layer " + name_ + ": parameter " + p.name.local + " has " + std::to_string(p.shape.size()) +
                               " dimensions");
  // PEFT's bias "none": with LoRA only the adapters train.
  if (env_.lora != nullptr && !p.adapter) p.frozen = true;
  params_.push_back(std::move(p));
  const int index = static_cast<int>(params_.size()) - 1;
  // Embeddings and norms are no Linear: a LoRA target that names one is refused (their module is
  // the full name without its last part).
  const dscpp_param_role role = params_.back().role;
  if (env_.lora != nullptr && (role == DSCPP_ROLE_EMBEDDING || role == DSCPP_ROLE_NORM)) {
    const std::string full = full_name(index);
    env_.lora->other(full.substr(0, full.rfind('.')), role == DSCPP_ROLE_NORM ? "a norm" : "an embedding");
  }
  return index;
}

std::string Layer::full_name(int i) const {
  const ParamSpec& p = params_.at(static_cast<size_t>(i));
  return p.name.full.empty() ? name_ + "." + p.name.local : p.name.full;
}

void Layer::describe(dscpp_layer_desc* out) {
  // The strings the descriptors point at live as long as the layer; built once.
  if (descs_.size() != params_.size()) {
    local_names_.clear(), full_names_.clear(), tied_.clear(), descs_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      local_names_.push_back(params_[i].name.local);
      full_names_.push_back(full_name(static_cast<int>(i)));
      tied_.push_back(params_[i].tied_to);
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const ParamSpec& p = params_[i];
      dscpp_param_desc d{};
      d.name = local_names_[i].c_str();
      d.full_name = full_names_[i].c_str();
      d.tied_to = tied_[i].empty() ? nullptr : tied_[i].c_str();
      d.ndim = static_cast<int32_t>(p.shape.size());
      for (size_t k = 0; k < p.shape.size(); ++k) d.shape[k] = p.shape[k];
      d.init = p.init.kind;
      d.init_a = p.init.a;
      d.file_transposed = p.file_transposed ? 1 : 0;
      d.role = p.role;
      d.frozen = p.frozen ? 1 : 0;
      d.adapter = p.adapter ? 1 : 0;
      descs_.push_back(d);
    }
  }
  *out = dscpp_layer_desc{};
  out->name = name_.c_str();
  out->num_params = static_cast<int32_t>(descs_.size());
  out->params = descs_.data();
  out->output_numel = output_numel_;
  out->saved_bytes = saved.bytes();
  out->workspace_bytes = fwd_work.bytes() > bwd_work.bytes() ? fwd_work.bytes() : bwd_work.bytes();
  out->decode_cache_bytes = decode_cache.bytes();
  out->decode_workspace_bytes = decode_work.bytes();
  out->decode_output_numel = decode_output_numel;
}

namespace {

ModelFactory g_factory = nullptr;
dscpp_model_api g_api{};

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
    set_error(err, "out of host memory");
    return DSCPP_E_INTERNAL;
  } catch (const std::exception& e) {
    set_error(err, e.what());
    return DSCPP_E_INTERNAL;
  }
}

Model& model_of(void* m) { return *static_cast<Model*>(m); }

Layer& layer_of(void* m, int32_t index) {
  Model& model = model_of(m);
  if (index < 0 || static_cast<size_t>(index) >= model.layers.size())
    fail(DSCPP_E_INVALID_ARGUMENT, "layer " + std::to_string(index) + " of a model with " +
                                       std::to_string(model.layers.size()) + " layers");
  return *model.layers[static_cast<size_t>(index)];
}

int api_create(int argc, const char* const* argv, const dscpp_host_info* host, void** model, dscpp_error* err) {
  return guarded(err, [&] {
    if (model == nullptr || host == nullptr)
      fail(DSCPP_E_INVALID_ARGUMENT, "create without a model pointer or host info");
    std::vector<std::string> args(argv, argv + argc);
    std::unique_ptr<Model> m = g_factory(args, *host);
    if (m == nullptr || m->layers.empty()) fail(DSCPP_E_INTERNAL, "the model has no layers");
    m->host = *host;
    *model = m.release();
  });
}

void api_destroy(void* model) { delete static_cast<Model*>(model); }

int api_describe(void* model, dscpp_model_desc* out, dscpp_error* err) {
  return guarded(err, [&] { static_cast<Model*>(model)->describe(out); });
}

int api_layer(void* model, int32_t index, dscpp_layer_desc* out, dscpp_error* err) {
  return guarded(err, [&] { layer_of(model, index).describe(out); });
}

int api_forward(void* model, int32_t index, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] {
    Layer& l = layer_of(model, index);
    l.forward(Call{*ctx, l});
  });
}

int api_backward(void* model, int32_t index, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] {
    Layer& l = layer_of(model, index);
    l.backward(Call{*ctx, l});
  });
}

int api_decode(void* model, int32_t index, const dscpp_decode_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] {
    Layer& l = layer_of(model, index);
    l.decode(DecodeCall{*ctx, l});
  });
}

int api_load_sample(void* model, int32_t split, int64_t index, void* input, int32_t* target, dscpp_error* err) {
  return guarded(err, [&] { model_of(model).load_sample(split, index, input, target); });
}

int api_batch_lengths(void* model, const void* inputs, const int32_t* targets, int64_t batch, int64_t* lengths,
                      dscpp_error* err) {
  return guarded(err, [&] {
    const std::array<int64_t, 2> n = model_of(model).batch_lengths(inputs, targets, batch);
    std::copy(n.begin(), n.end(), lengths);
  });
}

}  // namespace

const dscpp_model_api* model_api(const char* name, ModelFactory factory) {
  if (g_factory == nullptr) {
    g_factory = factory;
    g_api.name = name;
    g_api.create = api_create;
    g_api.destroy = api_destroy;
    g_api.describe = api_describe;
    g_api.layer = api_layer;
    g_api.forward = api_forward;
    g_api.backward = api_backward;
    g_api.load_sample = api_load_sample;
    g_api.report = nullptr;
    g_api.decode = api_decode;
    g_api.batch_lengths = api_batch_lengths;
    dscpp_model_api_stamp(&g_api);
  }
  return &g_api;
}

}  // namespace dscpp::layers
