// The model's parameters as one rank holds them, for a pass over the layers: the trained ones
// (a ParamStore the optimizer updates) and, when some are frozen (runtime/model/frozen_params.h),
// the frozen ones in a second ParamStore of the same kind — partitioned, gathered, prefetched and
// offloaded as the stage says, as DeepSpeed's ZeRO-3 treats a parameter without requires_grad —
// that has no master weights or gradients and changes only when weights are loaded. A pass
// drives both, layer by layer, so every rank issues their gathers in one order.
#pragma once

#include "runtime/zero/param_store.h"

#include <cstdint>

namespace dscpp::runtime {

class ModelParams {
 public:
  ModelParams(ParamStore& trained, ParamStore* frozen) : trained_(&trained), frozen_(frozen) {}

  ParamStore& trained() const { return *trained_; }
  ParamStore* frozen() const { return frozen_; }  // null when nothing is frozen

  struct Layer {
    const void* trained = nullptr;  // at the trained layout's layer_range[layer].first
    const void* frozen = nullptr;   // at the frozen layout's (null without one)
  };
  void begin_pass(bool backward, bool training) const {
    trained_->begin_pass(backward, training);
    if (frozen_) frozen_->begin_pass(backward, training);
  }
  Layer layer_params(int layer, bool backward, bool prefetch = true) const {
    Layer l{trained_->layer_params(layer, backward, prefetch)};
    if (frozen_) l.frozen = frozen_->layer_params(layer, backward, prefetch);
    return l;
  }
  void layer_done(int layer, bool backward) const {
    trained_->layer_done(layer, backward);
    if (frozen_) frozen_->layer_done(layer, backward);
  }
  // ParamStore::follow_forward over both, layer by layer (the order a computing rank gathers in).
  void follow_forward(int first = 0, int end = -1) const;
  void release_all() const {
    trained_->release_all();
    if (frozen_) frozen_->release_all();
  }
  // After weights were loaded: both stores' owned slices changed.
  void publish() const {
    trained_->publish();
    if (frozen_) frozen_->publish();
  }
  void settle() const {
    trained_->settle();
    if (frozen_) frozen_->settle();
  }
  void flush() const {  // offload_param: what was written has reached its home
    trained_->home().flush();
    if (frozen_) frozen_->home().flush();
  }
  int64_t gathered_elements() const {
    return trained_->gathered_elements() + (frozen_ ? frozen_->gathered_elements() : 0);
  }

 private:
  ParamStore* trained_;
  ParamStore* frozen_;
};

}  // namespace dscpp::runtime
