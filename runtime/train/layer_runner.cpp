#include "runtime/train/layer_runner.h"

#include "core/error.h"
#include "core/knobs.h"
#include "kernels/device_math.h"

#include <algorithm>
#include <array>
#include <chrono>

namespace dscpp::runtime {

LayerRunner::LayerRunner(const Plugin& plugin, Device& device, const dscpp_ops& ops, const FlatLayout& layout,
                         int64_t max_batch, DType param_dtype, DType grad_dtype,
                         const CheckpointingOptions& checkpointing, Device* host, const FlatLayout* frozen)
    : plugin_(plugin),
      device_(device),
      ops_(ops),
      layout_(layout),
      frozen_(frozen),
      max_batch_(max_batch),
      param_dtype_(param_dtype),
      grad_dtype_(grad_dtype),
      compute_(dtype_of(ops.dtype)),
      ckpt_(checkpointing),
      act_layout_(make_activation_layout(plugin.layers(), checkpointing, max_batch, dtype_size(compute_))) {
  const auto& layers = plugin.layers();
  if (compute_ != DType::f32 && compute_ != param_dtype_)
    fail("the ops table computes in {} but parameters are stored in {}: a 16-bit compute dtype needs parameters of "
         "that dtype",
         dtype_name(compute_), dtype_name(param_dtype_));
  const auto ce = static_cast<int64_t>(dtype_size(compute_));
  acts_ = std::make_unique<ActivationMemory>(act_layout_, device, host);
  segment_input_.assign(static_cast<size_t>(act_layout_.segments()), nullptr);
  if (ckpt_.enabled && ckpt_.profile) profile_.emplace(act_layout_.segments());
  int64_t max_ws = 0;
  for (const LayerDecl& l : layers) max_ws = std::max(max_ws, l.workspace_bytes);
  workspace_ = DeviceBuffer(device, static_cast<size_t>(max_batch * max_ws + kGuardBytes), MemCategory::buffers);
  const char* guard_knob = knob("DSCPP_GUARD_BUFFERS");
  const std::string guard = guard_knob != nullptr && *guard_knob ? guard_knob : device.is_host() ? "always" : "first";
  if (guard == "always") guard_passes_ = -1;
  else if (guard == "first") guard_passes_ = 2;  // the first forward and its backward
  else if (guard == "off") guard_passes_ = 0;
  else fail("DSCPP_GUARD_BUFFERS={}: expected always, first or off", guard);
  grad_a_ = DeviceBuffer(device, static_cast<size_t>(act_layout_.grad_bytes / 2), MemCategory::activations);
  grad_b_ = DeviceBuffer(device, static_cast<size_t>(act_layout_.grad_bytes / 2), MemCategory::activations);
  if (param_dtype_ != compute_)
    param32_ =
        DeviceBuffer(device, static_cast<size_t>(layout.max_layer_numel + (frozen ? frozen->max_layer_numel : 0)) * 4,
                     MemCategory::buffers);
  if (grad_dtype_ != compute_)
    grad_stage_ = DeviceBuffer(device, static_cast<size_t>(layout.max_layer_numel * ce), MemCategory::buffers);
  if (compute_ != DType::f32 && plugin.data().input_dtype == DSCPP_F32)
    input_cast_ = DeviceBuffer(device, static_cast<size_t>(max_batch * plugin.data().input_numel * ce),
                               MemCategory::buffers);
  auto slots_of = [&](const FlatLayout& lay) {
    std::vector<size_t> first(layers.size() + 1, 0);
    for (const ParamSlot& s : lay.params) ++first[static_cast<size_t>(s.layer) + 1];
    for (size_t l = 0; l < layers.size(); ++l) first[l + 1] += first[l];
    return first;
  };
  layer_slots_ = slots_of(layout);
  if (frozen) frozen_slots_ = slots_of(*frozen);
  param_ptrs_.resize(layers.size());
  grad_ptrs_.resize(layers.size());
  owned_ties_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const size_t slots = std::max<size_t>(static_cast<size_t>(layers[l].num_slots),
                                          layers[l].params.size() + layers[l].tied.size());
    param_ptrs_[l].assign(slots, nullptr);
    grad_ptrs_[l].assign(slots, nullptr);
    for (const TiedParam& t : layers[l].tied) {
      const size_t bytes = static_cast<size_t>(t.numel * ce);
      owned_ties_[static_cast<size_t>(t.owner_layer)].push_back(ties_.size());
      const ParamDecl& owner = layers[static_cast<size_t>(t.owner_layer)].params[static_cast<size_t>(t.owner_param)];
      ties_.push_back(Tie{static_cast<int>(l), t.slot, owner.slot, owner.frozen, t.numel,
                          DeviceBuffer(device, bytes, MemCategory::buffers),
                          owner.frozen ? DeviceBuffer() : DeviceBuffer(device, bytes, MemCategory::buffers)});
    }
  }
}

namespace {
// The guard pattern: not a likely float, zero or NaN run.
std::array<uint8_t, kGuardBytes> guard_pattern() {
  std::array<uint8_t, kGuardBytes> g{};
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<uint8_t>(0xA5 ^ (i * 37));
  return g;
}
}  // namespace

// The extents of one call's buffers that a layer may write: output, saved, workspace and (in
// backward) grad_input, each to what it declared for this batch, guard bytes after each.
std::vector<LayerRunner::Guard> LayerRunner::arm_guards(int layer, const dscpp_layer_ctx& ctx, bool backward) {
  std::vector<Guard> g;
  if (guard_passes_ == 0) return g;
  const LayerDecl& d = plugin_.layers()[static_cast<size_t>(layer)];
  const int64_t ce = static_cast<int64_t>(dtype_size(compute_));
  if (!backward) g.push_back({"output", ctx.output, batch_ * d.output_numel * ce, d.output_numel * ce});
  g.push_back({"saved", ctx.saved, batch_ * d.saved_bytes, d.saved_bytes});
  g.push_back({"workspace", ctx.workspace, batch_ * d.workspace_bytes, d.workspace_bytes});
  if (backward && ctx.grad_input != nullptr) {
    const int64_t in = plugin_.layers()[static_cast<size_t>(layer) - 1].output_numel * ce;
    g.push_back({"grad_input", ctx.grad_input, batch_ * in, in});
  }
  static const std::array<uint8_t, kGuardBytes> pattern = guard_pattern();
  for (const Guard& x : g) device_.copy_from_host(static_cast<char*>(x.base) + x.bytes, pattern.data(), kGuardBytes);
  return g;
}

void LayerRunner::check_guards(int layer, const std::vector<Guard>& guards, bool backward) const {
  static const std::array<uint8_t, kGuardBytes> pattern = guard_pattern();
  std::array<uint8_t, kGuardBytes> seen{};
  for (const Guard& x : guards) {
    device_.copy_to_host(seen.data(), static_cast<const char*>(x.base) + x.bytes, kGuardBytes);
    if (seen != pattern)
      fail("model plugin {}: layer '{}' wrote past its {} buffer in {}: it declares {} bytes per sample ({} for this "
           "batch of {}) and the bytes after them changed; the layer needs more than it declares (its "
           "dscpp_layer_desc{} is too small)",
           plugin_.name(), plugin_.layers()[static_cast<size_t>(layer)].name, x.what, backward ? "backward" : "forward",
           x.per_sample, x.bytes, batch_,
           std::string(x.what) == "saved" ? ".saved_bytes" : std::string(x.what) == "workspace" ? ".workspace_bytes"
                                                                                              : ".output_numel");
  }
}

void LayerRunner::check_op(const char* what, int status) const {
  if (status != DSCPP_OK)
    fail("sharing a parameter between layers: the ops table's {} failed with status {}", what, status);
}

// A shared parameter: the owner's forward leaves a copy of its values for the user, whose
// gradient goes to a zeroed buffer that the owner's backward (always later: the owner is an
// earlier layer) adds into the owner's gradient before the owner adds its own.
void LayerRunner::point_ties(int layer, bool backward, bool decoding) {
  const auto l = static_cast<size_t>(layer);
  if (tie_fresh_.size() != ties_.size()) tie_fresh_.assign(ties_.size(), false);
  for (size_t k : owned_ties_[l]) {
    Tie& t = ties_[k];
    const auto slot = static_cast<size_t>(t.owner_slot);
    // Generation decodes token after token with the same parameters: one copy serves them all.
    if (!backward && !(decoding && tie_fresh_[k]))
      check_op("copy", ops_.copy(&ops_, param_ptrs_[l][slot], t.value.data(), t.numel));
    else if (backward && !t.frozen)
      check_op("axpy", ops_.axpy(&ops_, 1.0f, t.grad.data(), grad_ptrs_[l][slot], t.numel));
    tie_fresh_[k] = decoding;
  }
  for (Tie& t : ties_) {
    if (t.layer != layer) continue;
    param_ptrs_[l][static_cast<size_t>(t.slot)] = t.value.data();
    grad_ptrs_[l][static_cast<size_t>(t.slot)] = backward && !t.frozen ? t.grad.data() : nullptr;
    if (backward && !t.frozen) check_op("fill", ops_.fill(&ops_, t.grad.data(), 0.0f, t.numel));
  }
}

void LayerRunner::bind(void* params, void* grads, const void* frozen) {
  const int64_t pe = static_cast<int64_t>(dtype_size(param_dtype_)), ge = static_cast<int64_t>(dtype_size(grad_dtype_));
  DSCPP_CHECK((frozen_ == nullptr) == (frozen == nullptr));
  source_ = [this, params, grads, frozen, pe, ge](int layer, LayerPass) {
    const auto l = static_cast<size_t>(layer);
    int64_t first = layout_.layer_range[l].first;
    return LayerMemory{static_cast<const char*>(params) + first * pe,
                       grads ? static_cast<char*>(grads) + first * ge : nullptr,
                       frozen ? static_cast<const char*>(frozen) + frozen_->layer_range[l].first * pe : nullptr};
  };
}

void LayerRunner::point_at(int layer, const LayerMemory& m, bool backward, bool decoding) {
  const auto l = static_cast<size_t>(layer);
  const auto ce = static_cast<int64_t>(dtype_size(compute_));
  int64_t widened = 0;  // elements of param32_ in use
  // Views in the compute dtype where storage has another: widened 16-bit parameters (the trained
  // ones, then the frozen ones), and zeroed gradients that are added into gradient storage after
  // the call.
  auto point = [&](const FlatLayout& lay, const std::vector<size_t>& slots, const void* params, void* grads) {
    auto [first, end] = lay.layer_range[l];
    if (first == end) return;
    if (param_dtype_ != compute_) {
      float* wide = param32_.as<float>() + widened;
      kernels::math_of(device_).load_to_f32(params, param_dtype_, wide, 1.0f, end - first);
      params = wide;
      widened += end - first;
    }
    for (size_t i = slots[l]; i < slots[l + 1]; ++i) {
      const ParamSlot& s = lay.params[i];
      param_ptrs_[l][static_cast<size_t>(s.index)] = static_cast<const char*>(params) + (s.offset - first) * ce;
      grad_ptrs_[l][static_cast<size_t>(s.index)] =
          grads != nullptr ? static_cast<char*>(grads) + (s.offset - first) * ce : nullptr;
    }
  };
  void* grads = backward ? m.grads : nullptr;
  if (backward && grad_dtype_ != compute_) {
    auto [first, end] = layout_.layer_range[l];
    device_.zero(grad_stage_.data(), static_cast<size_t>((end - first) * ce));
    grads = grad_stage_.data();
  }
  point(layout_, layer_slots_, m.params, grads);
  if (frozen_ != nullptr) point(*frozen_, frozen_slots_, m.frozen, nullptr);
  if (!ties_.empty()) point_ties(layer, backward, decoding);
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
  const int segment = act_layout_.segment_of[static_cast<size_t>(layer)];
  // A segment's first layer reads the segment's input: the batch, or its checkpoint.
  ctx.input = layer == 0 ? input_
              : layer == act_layout_.segment_begin[static_cast<size_t>(segment)]
                  ? segment_input_[static_cast<size_t>(segment)]
                  : acts_->output(layer - 1);
  ctx.data_input = input_;
  ctx.stream_len[0] = lengths_[0];
  ctx.stream_len[1] = lengths_[1];
  ctx.output = acts_->output(layer);
  ctx.saved = acts_->saved(layer);
  ctx.workspace = workspace_.data();
  return ctx;
}

dscpp_metrics LayerRunner::forward(const void* input, const int32_t* target, int64_t batch, bool training,
                                   uint64_t rng_seed, int layers, StreamLengths lengths) {
  DSCPP_CHECK(batch > 0 && batch <= max_batch_);
  if (input_cast_.data() != nullptr) {  // float data in the compute dtype, once per micro-batch
    kernels::math_of(device_).convert_into(input_cast_.data(), compute_, input, DType::f32,
                                           batch * plugin_.data().input_numel);
    input = input_cast_.data();
  }
  input_ = input;
  target_ = target;
  batch_ = batch;
  training_ = training;
  rng_seed_ = rng_seed;
  lengths_ = lengths;
  metrics_ = {};
  const int stop = layers > 0 ? layers : static_cast<int>(plugin_.layers().size());
  for (int s = 0; s < act_layout_.segments() && act_layout_.segment_begin[static_cast<size_t>(s)] < stop; ++s)
    forward_segment(s, false, stop);
  if (guard_passes_ > 0) --guard_passes_;
  return metrics_;
}

void LayerRunner::decode(int layer, dscpp_decode_ctx& ctx) {
  point_at(layer, source_(layer, LayerPass::forward), false, true);
  ctx.ops = &ops_;
  ctx.params = param_ptrs_[static_cast<size_t>(layer)].data();
  plugin_.decode(layer, ctx);
  if (after_layer) after_layer(layer, false);
}

size_t LayerRunner::checkpoint_bytes(int segment) const {
  const int before = act_layout_.segment_begin[static_cast<size_t>(segment)] - 1;
  return static_cast<size_t>(batch_ * plugin_.layers()[static_cast<size_t>(before)].output_numel) *
         dtype_size(compute_);
}

// The segment's layers forward, in the arena: in the forward pass after keeping the segment's
// input as its checkpoint, or in backward (recompute) from that checkpoint, with the same
// contexts — so the same values, bit for bit.
void LayerRunner::forward_segment(int segment, bool recompute, int stop) {
  const int begin = act_layout_.segment_begin[static_cast<size_t>(segment)];
  const int end = std::min(stop, act_layout_.segment_begin[static_cast<size_t>(segment) + 1]);
  const int n = static_cast<int>(plugin_.layers().size());
  if (ckpt_.synchronize) device_.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  if (segment > 0) {
    segment_input_[static_cast<size_t>(segment)] =
        recompute ? acts_->restore(segment, checkpoint_bytes(segment))
                  : acts_->keep(segment, acts_->output(begin - 1), checkpoint_bytes(segment));
  }
  for (int l = begin; l < end; ++l) {
    point_at(l, source_(l, recompute ? LayerPass::recompute : LayerPass::forward), false);
    dscpp_layer_ctx ctx = context(l);
    if (l == n - 1) {  // the loss layer is in the last segment, which is never recomputed
      ctx.target = target_;
      ctx.metrics = &metrics_;
    }
    const std::vector<Guard> guards = arm_guards(l, ctx, false);
    plugin_.forward(l, ctx);
    check_guards(l, guards, false);
    // A recomputed segment's last layer is backward's next: keep its parameters gathered.
    if (after_layer && !(recompute && l == end - 1)) after_layer(l, false);
  }
  if (ckpt_.synchronize) device_.synchronize();
  if (profile_) profile_->add(segment, recompute, std::chrono::steady_clock::now() - t0);
}

std::string LayerRunner::checkpoint_profile() {
  return profile_ ? profile_->report(act_layout_) : std::string();
}

void LayerRunner::backward(float loss_grad, const std::function<void(int)>& layer_done) {
  DSCPP_CHECK(batch_ > 0 && target_ != nullptr);
  int n = static_cast<int>(plugin_.layers().size());
  void* grad_out = nullptr;
  for (int l = n - 1; l >= 0; --l) {
    const int segment = act_layout_.segment_of[static_cast<size_t>(l)];
    // Entering a segment other than the last from above: its activations are gone, run it again.
    if (segment + 1 < act_layout_.segments() && l == act_layout_.segment_begin[static_cast<size_t>(segment) + 1] - 1)
      forward_segment(segment, true, static_cast<int>(plugin_.layers().size()));
    LayerMemory mem = source_(l, LayerPass::backward);
    point_at(l, mem, true);
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
    const std::vector<Guard> guards = arm_guards(l, ctx, true);
    plugin_.backward(l, ctx);
    check_guards(l, guards, true);
    if (grad_dtype_ != compute_) {
      auto [first, end] = layout_.layer_range[static_cast<size_t>(l)];
      kernels::math_of(device_).add_into(mem.grads, grad_dtype_, grad_stage_.data(), compute_, end - first);
    }
    if (after_layer) after_layer(l, true);
    if (layer_done) layer_done(l);
    grad_out = grad_in;
  }
  if (guard_passes_ > 0) --guard_passes_;
}

}  // namespace dscpp::runtime
