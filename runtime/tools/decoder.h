// A model's layers as a token-at-a-time decoder for up to `sequences` sequences at once: each
// layer's decode call (model.h) with its per-sequence caches, and for an encoder-decoder the
// encoder run once over the sources (the layer runner's forward over the encoder's layers) whose
// output every decode call sees as its memory. Beam search reorders the caches between steps.
// Weights: one fp32 flat array on the device (the single-rank tools).
#pragma once

#include "device/device.h"
#include "dscpp/model.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"
#include "runtime/train/layer_runner.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dscpp::runtime {

class Decoder {
 public:
  Decoder(const Plugin& plugin, Device& device, const dscpp_ops& ops, const FlatLayout& layout, const void* params,
          int64_t sequences);
  int64_t vocab() const { return vocab_; }
  int64_t capacity() const { return capacity_; }
  // The positions the caches hold (an encoder-decoder's decoder length; a decoder's context).
  int64_t positions() const { return positions_; }
  // An encoder-decoder's sources (ids, each at most the encoder's length): runs the encoder once
  // per source and gives sequences [i·group, (i + 1)·group) source i's output as memory.
  void encode(const std::vector<std::vector<int32_t>>& sources, int64_t group);
  // The next-token logits (n × vocab, fp32, host) of the first n = tokens.size() sequences.
  void step(const std::vector<int32_t>& tokens, int64_t position, std::vector<float>& logits);
  // Sequence i's caches become sequence from[i]'s.
  void reorder(const std::vector<int64_t>& from);

 private:
  const Plugin& plugin_;
  Device& device_;
  const dscpp_ops& ops_;
  const FlatLayout& layout_;
  const void* params_;
  int first_;  // the first decoding layer (after the encoder)
  int64_t capacity_, vocab_, positions_;
  std::vector<std::vector<const void*>> ptrs_;  // per layer, shared parameters pointing at their owner's
  std::vector<DeviceBuffer> caches_;
  DeviceBuffer workspace_, act_[2], tokens_, memory_, valid_, reorder_scratch_;
  std::unique_ptr<LayerRunner> encoder_;
  int64_t memory_rows_ = 0;  // sequences the memory holds
};

}  // namespace dscpp::runtime
