// Runs the plugin's layers forward and backward over memory the runtime owns.
//
// The runner keeps every layer's output of the current micro-batch (the next layer's backward needs
// its input) plus the bytes each layer asked to save, one shared workspace, and two gradient
// buffers that backward ping-pongs between. With activation checkpointing it keeps only the
// segments' inputs and runs each segment's forward again in backward
// (runtime/model/activation_layout.h says where every activation byte lives). Where a
// layer's parameters and gradients are is asked per call from a memory source (the engine's ZeRO
// stage decides: whole arrays, partition-group staging buffers, gathered stage-3 buffers),
// addressed by the flat layout.
//
// Dtypes: the layers compute in the ops table's dtype (the compute dtype). With fp16/bf16
// parameters it is either that 16-bit dtype (the CUDA table: parameters go to the layers as they
// are stored, activations and their gradients are 16-bit, a float data input is cast once before
// layer 0) or fp32 (the CPU table, or DSCPP_COMPUTE_DTYPE=fp32: before a layer runs its
// parameters are widened into an fp32 scratch, and activations stay fp32). Gradients the layer
// produces go straight into gradient storage when it has the compute dtype; otherwise (fp32
// compute with 16-bit gradients, or 16-bit compute with data_types.grad_accum_dtype fp32) into a
// zeroed scratch of the compute dtype that is then added into storage with one rounding
// (DeepSpeed accumulates 16-bit gradients the same way). Either way loss scaling and overflow
// act on the stored gradients.
#pragma once

#include "core/dtype.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"
#include "runtime/train/activation_checkpointing.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::runtime {

// Why a layer's memory is asked for: its forward, the forward again from a checkpoint inside
// backward (parameters only, as in backward's order), or its backward.
enum class LayerPass { forward, recompute, backward };

class LayerRunner {
 public:
  // `checkpointing` from the config; `host` holds the checkpoints with cpu_checkpointing.
  // `layout` holds the trained parameters; `frozen` (when some are frozen) the others, whose
  // gradient pointers the layers get as NULL.
  LayerRunner(const Plugin& plugin, Device& device, const dscpp_ops& ops, const FlatLayout& layout, int64_t max_batch,
              DType param_dtype = DType::f32, DType grad_dtype = DType::f32,
              const CheckpointingOptions& checkpointing = {}, Device* host = nullptr,
              const FlatLayout* frozen = nullptr);

  // A layer's memory for one call: pointers to the element at the layer's first flat offset
  // (layout.layer_range[layer].first) in the parameter / gradient dtype, and to the frozen
  // layout's (frozen: null without one); grads are asked for in backward only (never for a
  // recompute).
  struct LayerMemory {
    const void* params = nullptr;
    void* grads = nullptr;
    const void* frozen = nullptr;
  };
  using MemorySource = std::function<LayerMemory(int layer, LayerPass pass)>;
  void set_source(MemorySource source) { source_ = std::move(source); }
  // Whole flat arrays of layout.total elements, and of the frozen layout's total (with one).
  void bind(void* params, void* grads, const void* frozen = nullptr);

  // Runs after each layer call (ZeRO-3 releases there); may be empty. A recompute counts as a
  // forward (backward = false), except for a segment's last layer, whose backward comes next.
  std::function<void(int layer, bool backward)> after_layer;

  // Forward over all layers, or the first `layers` (an encoder-decoder's encoder) when > 0.
  // `target` (device, batch × target_numel) may be null (predict). `lengths`: the positions of
  // each stream the layers compute (the micro-batch's Plugin::batch_lengths; {0, 0}: all), the
  // same for the backward that follows.
  dscpp_metrics forward(const void* input, const int32_t* target, int64_t batch, bool training, uint64_t rng_seed,
                        int layers = 0, StreamLengths lengths = {});
  // Layer l's output of the last forward (compute dtype, batch × its output_numel).
  const void* output(int layer) const { return acts_->output(layer); }
  // One decode call of a layer (generation): its parameters from the memory source as a forward
  // call gets them (gathered at stage 3, shared ones from their owner's last call), then
  // after_layer. `ctx.params` is filled in.
  void decode(int layer, dscpp_decode_ctx& ctx);
  const dscpp_ops& ops() const { return ops_; }
  // Backward from the loss layer; `layer_done(i)` runs after layer i, when its gradients for
  // this micro-step are complete.
  void backward(float loss_grad, const std::function<void(int)>& layer_done = {});

  // The loss layer's output of the last forward, in the compute dtype.
  const void* last_output() const { return acts_->output(static_cast<int>(plugin_.layers().size()) - 1); }
  DType compute_dtype() const { return compute_; }
  int64_t last_output_numel() const { return plugin_.layers().back().output_numel; }
  int64_t max_batch() const { return max_batch_; }
  const ActivationLayout& activation_layout() const { return act_layout_; }
  // With activation_checkpointing.profile: the per-segment times since the last call; else "".
  std::string checkpoint_profile();

 private:
  dscpp_layer_ctx context(int layer) const;
  void point_at(int layer, const LayerMemory& m, bool backward, bool decoding = false);
  void forward_segment(int segment, bool recompute, int stop);
  size_t checkpoint_bytes(int segment) const;

  const Plugin& plugin_;
  Device& device_;
  dscpp_ops ops_;
  const FlatLayout& layout_;
  const FlatLayout* frozen_;
  int64_t max_batch_;
  DType param_dtype_, grad_dtype_, compute_;
  CheckpointingOptions ckpt_;
  ActivationLayout act_layout_;
  std::unique_ptr<ActivationMemory> acts_;
  std::optional<CheckpointProfile> profile_;
  std::vector<const void*> segment_input_;  // per segment, on the device, for the micro-batch in flight
  MemorySource source_;
  DeviceBuffer workspace_, grad_a_, grad_b_;
  // One layer's parameters widened to fp32 (fp32 compute over 16-bit storage), its gradients in
  // the compute dtype when storage has another, and the data input in the compute dtype.
  DeviceBuffer param32_, grad_stage_, input_cast_;
  // layout.params[layer_slots_[l], layer_slots_[l+1]) are layer l's; frozen_slots_ the same in *frozen_.
  std::vector<size_t> layer_slots_, frozen_slots_;
  // Shared parameters (plugin.h's TiedParam): the using layer's view of the owner's values and
  // its gradient contribution, both in the compute dtype.
  struct Tie {
    int layer, slot, owner_slot;
    bool frozen;  // the owner is: no gradient
    int64_t numel;
    DeviceBuffer value, grad;
  };
  // Buffer guards (DSCPP_GUARD_BUFFERS): a region a call may write, `bytes` long for this batch.
  struct Guard {
    const char* what;
    void* base;
    int64_t bytes, per_sample;
  };
  std::vector<Guard> arm_guards(int layer, const dscpp_layer_ctx& ctx, bool backward);
  void check_guards(int layer, const std::vector<Guard>& guards, bool backward) const;
  int guard_passes_ = -1;  // passes (forward or backward) still checked; -1: all
  void point_ties(int layer, bool backward, bool decoding);
  void check_op(const char* what, int status) const;
  std::vector<Tie> ties_;
  std::vector<std::vector<size_t>> owned_ties_;  // per layer: the ties_ it owns
  // Per tie: its value was copied by a decode call and no forward or backward ran since (the
  // parameters cannot have changed), so the next decode calls need not copy it again.
  std::vector<bool> tie_fresh_;
  std::vector<std::vector<const void*>> param_ptrs_;
  std::vector<std::vector<void*>> grad_ptrs_;
  // The micro-batch in flight.
  const void* input_ = nullptr;
  const int32_t* target_ = nullptr;
  int64_t batch_ = 0;
  uint64_t rng_seed_ = 0;
  StreamLengths lengths_{};
  bool training_ = false;
  dscpp_metrics metrics_{};
};

}  // namespace dscpp::runtime
