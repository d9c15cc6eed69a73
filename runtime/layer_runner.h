// Runs the plugin's layers forward and backward over memory the runtime owns.
//
// The parameters of all layers form one flat array in declaration order (each parameter
// starting on a 64-byte boundary); gradients mirror it. The runner keeps every layer's output
// of the current micro-batch (the next layer's backward needs its input) plus the bytes each
// layer asked to save, one shared workspace, and two gradient buffers that backward
// ping-pongs between. Engines for the ZeRO stages decide where parameter memory comes from;
// the runner only needs per-layer pointers.
#pragma once

#include "core/device.h"
#include "runtime/plugin.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct ParamSlot {
  std::string name;  // "<layer>.<param>"
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int layer = 0;
  int index = 0;       // within the layer
  int64_t offset = 0;  // elements from the start of the flat array
  dscpp_init_kind init = DSCPP_INIT_ZEROS;
  float init_a = 0;
};

struct FlatLayout {
  std::vector<ParamSlot> params;
  std::vector<std::pair<int64_t, int64_t>> layer_range;  // [begin, end) of each layer's params
  int64_t total = 0;                                     // elements incl. alignment padding
  int64_t numel = 0;                                     // real parameter elements
};

FlatLayout make_flat_layout(const std::vector<LayerDecl>& layers, int64_t align_elements = 16);

class LayerRunner {
 public:
  LayerRunner(const Plugin& plugin, Device& device, const dscpp_ops& ops, const FlatLayout& layout,
              int64_t max_batch);

  // Where parameters and gradients live (fp32 flat arrays of layout.total elements).
  void bind(float* params, float* grads);

  // Hooks around each layer call (ZeRO-3 gathers/releases there); may be empty.
  std::function<void(int layer, bool backward)> before_layer, after_layer;

  // Forward over all layers. `target` (device, batch × target_numel) may be null (predict).
  dscpp_metrics forward(const void* input, const int32_t* target, int64_t batch, bool training, uint64_t rng_seed);
  // Backward from the loss layer; `layer_done(i)` runs after layer i, when its gradients for
  // this micro-step are complete.
  void backward(float loss_grad, const std::function<void(int)>& layer_done = {});

  const void* last_output() const { return outputs_.back().data(); }
  int64_t last_output_numel() const { return plugin_.layers().back().output_numel; }
  int64_t max_batch() const { return max_batch_; }

 private:
  dscpp_layer_ctx context(int layer) const;

  const Plugin& plugin_;
  Device& device_;
  dscpp_ops ops_;
  const FlatLayout& layout_;
  int64_t max_batch_;
  std::vector<DeviceBuffer> outputs_, saved_;
  DeviceBuffer workspace_, grad_a_, grad_b_;
  std::vector<std::vector<const void*>> param_ptrs_;
  std::vector<std::vector<void*>> grad_ptrs_;
  // The micro-batch in flight.
  const void* input_ = nullptr;
  const int32_t* target_ = nullptr;
  int64_t batch_ = 0;
  uint64_t rng_seed_ = 0;
  bool training_ = false;
  dscpp_metrics metrics_{};
};

}  // namespace dscpp::runtime
