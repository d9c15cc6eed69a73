// Stage-0 gradient averaging: bucketed allreduce over the flat gradient array, DeepSpeed's
// arithmetic (engine.md 1.4): postscale by default (predivide by f, SUM, then ×f/dp), or
// prescale_gradients (×1/dp, SUM).
//
// Unlike DeepSpeed's stage 0, which reduces everything after backward, buckets are launched
// during the last micro-step's backward as soon as the layers they cover are done (the flat
// array is in forward order, so buckets form from its tail), overlapping communication with
// the backward of earlier layers. A bucket is flushed once it holds more than
// `bucket_elements` (DeepSpeed's "strictly greater" rule); results are identical to reducing
// after backward, since every bucket is reduced exactly once with the same engine.
#pragma once

#include "collectives/communicator.h"
#include "runtime/layer_runner.h"

#include <vector>

namespace dscpp::runtime {

class Stage0GradSync {
 public:
  Stage0GradSync(comm::Communicator& comm, const FlatLayout& layout, int64_t bucket_elements,
                 double predivide_factor, bool prescale);

  void begin(float* grads);   // before the last micro-step's backward
  void layer_done(int layer);  // that layer's gradients are final
  void finish();               // reduce the rest, wait for all, scale
  int64_t buckets_last_step() const { return buckets_; }

 private:
  void launch(int64_t begin, int64_t end);

  comm::Communicator& comm_;
  const FlatLayout& layout_;
  int64_t bucket_;
  double predivide_;
  bool prescale_;
  float* grads_ = nullptr;
  int64_t pending_end_ = 0;
  int64_t buckets_ = 0;
  std::vector<std::pair<comm::WorkHandle, std::pair<int64_t, int64_t>>> inflight_;
};

}  // namespace dscpp::runtime
