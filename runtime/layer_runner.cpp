#include "runtime/layer_runner.h"

#include "core/error.h"

#include <algorithm>

namespace dscpp::runtime {

FlatLayout make_flat_layout(const std::vector<LayerDecl>& layers, int64_t align) {
  FlatLayout layout;
  int64_t offset = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    int64_t begin = offset;
    for (size_t p = 0; p < layers[l].params.size(); ++p) {
      const ParamDecl& d = layers[l].params[p];
      ParamSlot slot{d.name, d.shape, d.numel, static_cast<int>(l), static_cast<int>(p), offset, d.init, d.init_a};
      offset += (d.numel + align - 1) / align * align;
      layout.numel += d.numel;
      layout.params.push_back(std::move(slot));
    }
    layout.layer_range.emplace_back(begin, offset);
  }
  layout.total = offset;
  return layout;
}

LayerRunner::LayerRunner(const Plugin& plugin, Device& device, const dscpp_ops& ops, const FlatLayout& layout,
                         int64_t max_batch)
    : plugin_(plugin), device_(device), ops_(ops), layout_(layout), max_batch_(max_batch) {
  const auto& layers = plugin.layers();
  int64_t max_out = 0, max_ws = 0;
  for (const LayerDecl& l : layers) {
    outputs_.emplace_back(device, static_cast<size_t>(max_batch * l.output_numel) * sizeof(float),
                          MemCategory::activations);
    saved_.emplace_back(device, static_cast<size_t>(max_batch * l.saved_bytes), MemCategory::activations);
    max_out = std::max(max_out, l.output_numel);
    max_ws = std::max(max_ws, l.workspace_bytes);
  }
  workspace_ = DeviceBuffer(device, static_cast<size_t>(max_batch * max_ws), MemCategory::buffers);
  grad_a_ = DeviceBuffer(device, static_cast<size_t>(max_batch * max_out) * sizeof(float), MemCategory::activations);
  grad_b_ = DeviceBuffer(device, static_cast<size_t>(max_batch * max_out) * sizeof(float), MemCategory::activations);
  param_ptrs_.resize(layers.size());
  grad_ptrs_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    param_ptrs_[l].assign(layers[l].params.size(), nullptr);
    grad_ptrs_[l].assign(layers[l].params.size(), nullptr);
  }
}

void LayerRunner::bind(float* params, float* grads) {
  for (const ParamSlot& s : layout_.params) {
    param_ptrs_[s.layer][s.index] = params + s.offset;
    grad_ptrs_[s.layer][s.index] = grads ? grads + s.offset : nullptr;
  }
}

dscpp_layer_ctx LayerRunner::context(int layer) const {
  dscpp_layer_ctx ctx{};
  ctx.struct_size = sizeof(dscpp_layer_ctx);
  ctx.ops = &ops_;
  ctx.batch = batch_;
  ctx.training = training_ ? 1 : 0;
  // Distinct per layer, identical for a layer's forward and backward in one micro-step.
  ctx.rng_seed = rng_seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(layer);
  ctx.params = param_ptrs_[static_cast<size_t>(layer)].data();
  ctx.input = layer == 0 ? input_ : outputs_[static_cast<size_t>(layer) - 1].data();
  ctx.output = outputs_[static_cast<size_t>(layer)].data();
  ctx.saved = saved_[static_cast<size_t>(layer)].data();
  ctx.workspace = workspace_.data();
  return ctx;
}

dscpp_metrics LayerRunner::forward(const void* input, const int32_t* target, int64_t batch, bool training,
                                   uint64_t rng_seed) {
  DSCPP_CHECK(batch > 0 && batch <= max_batch_);
  input_ = input;
  target_ = target;
  batch_ = batch;
  training_ = training;
  rng_seed_ = rng_seed;
  metrics_ = {};
  int n = static_cast<int>(plugin_.layers().size());
  for (int l = 0; l < n; ++l) {
    if (before_layer) before_layer(l, false);
    dscpp_layer_ctx ctx = context(l);
    if (l == n - 1) {
      ctx.target = target;
      ctx.metrics = &metrics_;
    }
    plugin_.forward(l, ctx);
    if (after_layer) after_layer(l, false);
  }
  return metrics_;
}

void LayerRunner::backward(float loss_grad, const std::function<void(int)>& layer_done) {
  DSCPP_CHECK(batch_ > 0 && target_ != nullptr);
  int n = static_cast<int>(plugin_.layers().size());
  void* grad_out = nullptr;
  for (int l = n - 1; l >= 0; --l) {
    if (before_layer) before_layer(l, true);
    dscpp_layer_ctx ctx = context(l);
    ctx.grads = grad_ptrs_[static_cast<size_t>(l)].data();
    ctx.grad_output = grad_out;
    void* grad_in = l == 0 ? nullptr : (grad_out == grad_a_.data() ? grad_b_.data() : grad_a_.data());
    ctx.grad_input = grad_in;
    if (l == n - 1) {
      ctx.target = target_;
      ctx.metrics = &metrics_;
      ctx.loss_grad = loss_grad;
    }
    plugin_.backward(l, ctx);
    if (after_layer) after_layer(l, true);
    if (layer_done) layer_done(l);
    grad_out = grad_in;
  }
}

}  // namespace dscpp::runtime
