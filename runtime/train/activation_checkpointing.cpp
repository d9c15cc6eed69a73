#include "runtime/train/activation_checkpointing.h"

#include "core/error.h"

#include <fmt/format.h>


namespace dscpp::runtime {

ActivationMemory::ActivationMemory(const ActivationLayout& layout, Device& device, Device* host)
    : layout_(layout), device_(device) {
  DSCPP_CHECK(host || !layout.checkpoints_on_host);
  Device& where = layout.checkpoints_on_host ? *host : device;
  arena_ = DeviceBuffer(device, static_cast<size_t>(layout.arena_bytes), MemCategory::activations);
  if (layout.staging_bytes > 0)
    staging_ = DeviceBuffer(device, static_cast<size_t>(layout.staging_bytes), MemCategory::activations);
  if (layout.contiguous) {
    if (layout.checkpoint_total > 0)
      contiguous_ = DeviceBuffer(where, static_cast<size_t>(layout.checkpoint_total), MemCategory::activations);
  } else {
    separate_.resize(layout.checkpoint_bytes.size());
    for (size_t s = 1; s < separate_.size(); ++s)
      separate_[s] = DeviceBuffer(where, static_cast<size_t>(layout.checkpoint_bytes[s]), MemCategory::activations);
  }
}

void* ActivationMemory::slot(int segment) const {
  DSCPP_CHECK(segment > 0 && segment < layout_.segments());
  if (layout_.contiguous)
    return static_cast<char*>(contiguous_.data()) + layout_.checkpoint_at[static_cast<size_t>(segment)];
  return separate_[static_cast<size_t>(segment)].data();
}

const void* ActivationMemory::keep(int segment, const void* src, size_t bytes) {
  void* dst = slot(segment);
  if (!layout_.checkpoints_on_host) {
    device_.copy(dst, src, bytes);
    return dst;
  }
  device_.copy_to_host(dst, src, bytes);
  device_.copy(staging_.data(), src, bytes);  // the arena is about to be reused by this segment
  return staging_.data();
}

const void* ActivationMemory::restore(int segment, size_t bytes) {
  void* kept = slot(segment);
  if (!layout_.checkpoints_on_host) return kept;
  device_.copy_from_host(staging_.data(), kept, bytes);
  return staging_.data();
}

void CheckpointProfile::add(int segment, bool recompute, std::chrono::steady_clock::duration d) {
  Sum& s = (recompute ? recompute_ : fwd_)[static_cast<size_t>(segment)];
  s.seconds += std::chrono::duration<double>(d).count();
  ++s.calls;
}

std::string CheckpointProfile::report(const ActivationLayout& layout) {
  auto ms = [](const Sum& s) { return s.calls ? 1e3 * s.seconds / static_cast<double>(s.calls) : 0.0; };
  std::string out = "activation checkpointing profile (ms per micro-batch):";
  for (size_t s = 0; s < fwd_.size(); ++s) {
    out += fmt::format(" | segment {} [layers {}-{}] forward {:.3f}", s, layout.segment_begin[s],
                       layout.segment_begin[s + 1] - 1, ms(fwd_[s]));
    if (recompute_[s].calls) out += fmt::format(" recompute {:.3f}", ms(recompute_[s]));
    fwd_[s] = recompute_[s] = Sum{};
  }
  return out;
}

}  // namespace dscpp::runtime
