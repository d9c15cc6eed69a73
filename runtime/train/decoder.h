// A model's layers as a token-at-a-time decoder for up to `sequences` sequences at once: each
// layer's decode call (model.h) with its per-sequence caches, and for an encoder-decoder the
// encoder run once over the sources (the layer runner's forward over the encoder's layers) whose
// output every decode call sees as its memory. Parameters come from the layer runner's memory
// source, so one decoder serves a single rank (a bound flat array) and ZeRO-Inference (stage-3
// gathers, which make every encode and step a collective). Beam search reorders the caches.
#pragma once

#include "device/device.h"
#include "runtime/model/plugin.h"
#include "runtime/train/layer_runner.h"
#include "runtime/train/search.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace dscpp::runtime {

class Decoder {
 public:
  Decoder(const Plugin& plugin, Device& device, LayerRunner& runner, int64_t sequences);
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
  LayerRunner& runner_;
  int first_;  // the first decoding layer (after the encoder)
  int64_t capacity_, vocab_, positions_;
  std::vector<DeviceBuffer> caches_;
  DeviceBuffer workspace_, act_[2], tokens_, memory_, valid_, reorder_scratch_, input_;
  int64_t memory_rows_ = 0;  // sequences the memory holds
  int64_t memory_len_ = 0;   // positions per sequence in the memory (the longest source encoded)
};

// Continues `prompts` (ids, together, up to the decoder's capacity) with `options`: an
// encoder-decoder encodes them and searches from its decoder start token; a decoder reads each
// prompt a token a step and continues it greedily once past it. `before_step` runs before every decode step (ZeRO
// Inference's synchronisation). Returns each prompt's generated tokens.
std::vector<std::vector<int32_t>> continue_prompts(Decoder& decoder, const Plugin& plugin,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const SearchOptions& options,
                                                   const std::function<void()>& before_step = {});

}  // namespace dscpp::runtime
