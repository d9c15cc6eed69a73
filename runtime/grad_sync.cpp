#include "runtime/grad_sync.h"

#include "core/thread_pool.h"

namespace dscpp::runtime {
namespace {
void scale(float* x, int64_t n, float s) {
  parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= s;
  });
}
}  // namespace

Stage0GradSync::Stage0GradSync(comm::Communicator& comm, const FlatLayout& layout, int64_t bucket_elements,
                               double predivide_factor, bool prescale)
    : comm_(comm), layout_(layout), bucket_(bucket_elements), predivide_(predivide_factor), prescale_(prescale) {}

void Stage0GradSync::begin(float* grads) {
  grads_ = grads;
  pending_end_ = layout_.total;
  buckets_ = 0;
  inflight_.clear();
}

void Stage0GradSync::launch(int64_t begin, int64_t end) {
  if (end <= begin) return;
  ++buckets_;
  if (comm_.size() == 1) return;
  float pre = prescale_ ? 1.0f / static_cast<float>(comm_.size())
                        : (predivide_ != 1.0 ? static_cast<float>(1.0 / predivide_) : 1.0f);
  if (pre != 1.0f) scale(grads_ + begin, end - begin, pre);
  inflight_.push_back({comm_.allreduce_async(grads_ + begin, static_cast<size_t>(end - begin), DType::f32),
                       {begin, end}});
}

void Stage0GradSync::layer_done(int layer) {
  int64_t ready_begin = layout_.layer_range[static_cast<size_t>(layer)].first;
  if (pending_end_ - ready_begin > bucket_) {
    launch(ready_begin, pending_end_);
    pending_end_ = ready_begin;
  }
}

void Stage0GradSync::finish() {
  launch(0, pending_end_);
  pending_end_ = 0;
  float post = prescale_ ? 1.0f : static_cast<float>(predivide_ / comm_.size());
  for (auto& [work, range] : inflight_) {
    work->wait();
    if (post != 1.0f) scale(grads_ + range.first, range.second - range.first, post);
  }
  inflight_.clear();
}

}  // namespace dscpp::runtime
