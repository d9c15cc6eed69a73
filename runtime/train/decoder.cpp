#include "runtime/train/decoder.h"

#include "core/error.h"

#include <algorithm>

namespace dscpp::runtime {

Decoder::Decoder(const Plugin& plugin, Device& device, LayerRunner& runner, int64_t sequences)
    : plugin_(plugin), device_(device), runner_(runner), first_(plugin.encoder().layers),
      capacity_(std::max<int64_t>(sequences, 1)) {
  const std::vector<LayerDecl>& layers = plugin.layers();
  vocab_ = layers.back().decode_output_numel;
  const EncoderDecl& enc = plugin.encoder();
  positions_ = enc.layers > 0 ? plugin.data().target_numel : plugin.data().tokens_per_sample;
  int64_t work = 0, widest = 0, cache = 1;
  caches_.resize(layers.size());
  for (size_t l = size_t(first_); l < layers.size(); ++l) {
    caches_[l] = DeviceBuffer(device, size_t(std::max<int64_t>(layers[l].decode_cache_bytes * capacity_, 1)),
                              MemCategory::activations, true);
    work = std::max(work, layers[l].decode_workspace_bytes);
    widest = std::max(widest, layers[l].decode_output_numel);
    cache = std::max(cache, layers[l].decode_cache_bytes);
  }
  const size_t elem = dtype_size(runner.compute_dtype());
  workspace_ = DeviceBuffer(device, size_t(std::max<int64_t>(work * capacity_, 1)), MemCategory::buffers);
  for (DeviceBuffer& a : act_) a = DeviceBuffer(device, size_t(widest * capacity_) * elem, MemCategory::activations);
  tokens_ = DeviceBuffer(device, size_t(capacity_) * 4, MemCategory::buffers);
  reorder_scratch_ = DeviceBuffer(device, size_t(cache * capacity_), MemCategory::buffers);
  if (enc.layers == 0) return;
  const int64_t out = layers[size_t(enc.layers - 1)].output_numel;
  if (out != enc.len * enc.width)
    fail("model plugin {}: its encoder's last layer '{}' outputs {} elements per sample, not {} × {}", plugin.name(),
         layers[size_t(enc.layers - 1)].name, out, enc.len, enc.width);
  memory_ = DeviceBuffer(device, size_t(capacity_ * out) * elem, MemCategory::activations);
  valid_ = DeviceBuffer(device, size_t(capacity_) * 4, MemCategory::buffers);
  input_ = DeviceBuffer(device, size_t(capacity_ * plugin.data().input_numel) * 4, MemCategory::buffers);
}

void Decoder::encode(const std::vector<std::vector<int32_t>>& sources, int64_t group) {
  const EncoderDecl& enc = plugin_.encoder();
  const int64_t b = static_cast<int64_t>(sources.size());
  if (enc.layers == 0) fail("generate: model plugin {} has no encoder", plugin_.name());
  if (b < 1 || b * group > capacity_ || b > runner_.max_batch())
    fail("generate: {} sources × {} for a decoder of {} sequences", b, group, capacity_);
  const int64_t ints = plugin_.data().input_numel;
  std::vector<int32_t> samples(size_t(b * ints), 0), valid;
  for (int64_t i = 0; i < b; ++i) {
    const std::vector<int32_t>& s = sources[size_t(i)];
    if (s.empty() || int64_t(s.size()) > enc.len)
      fail("generate: a source of {} tokens; the model's encoder takes 1 to {} (the plugin's --max_source_length)",
           s.size(), enc.len);
    int32_t* row = samples.data() + i * ints;
    std::fill(row, row + enc.len, enc.pad_id >= 0 ? enc.pad_id : 0);
    std::copy(s.begin(), s.end(), row);
    row[enc.len] = static_cast<int32_t>(s.size());
    for (int64_t g = 0; g < group; ++g) valid.push_back(static_cast<int32_t>(s.size()));
  }
  device_.copy_from_host(input_.data(), samples.data(), samples.size() * 4);
  // The encoder computes the sources' longest length only; every decode call sees that many.
  const std::vector<int32_t> no_targets(size_t(b * plugin_.data().target_numel), -1);
  const StreamLengths lengths = plugin_.batch_lengths(samples.data(), no_targets.data(), b);
  memory_len_ = lengths[0] > 0 && lengths[0] < enc.len ? lengths[0] : enc.len;
  runner_.forward(input_.data(), nullptr, b, false, 0, enc.layers, lengths);
  const size_t per = size_t(memory_len_ * enc.width) * dtype_size(runner_.compute_dtype());
  const auto* out = static_cast<const char*>(runner_.output(enc.layers - 1));
  for (int64_t i = 0; i < b * group; ++i)
    device_.copy(static_cast<char*>(memory_.data()) + size_t(i) * per, out + size_t(i / group) * per, per);
  device_.copy_from_host(valid_.data(), valid.data(), valid.size() * 4);
  memory_rows_ = b * group;
}

void Decoder::step(const std::vector<int32_t>& tokens, int64_t position, std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > capacity_) fail("generate: {} sequences in a decoder for {}", n, capacity_);
  if (first_ > 0 && n > memory_rows_) fail("generate: {} sequences but {} encoded", n, memory_rows_);
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab_) fail("generate: token {} is outside the vocabulary of {}", t, vocab_);
  device_.copy_from_host(tokens_.data(), tokens.data(), size_t(n) * 4);
  const std::vector<LayerDecl>& layers = plugin_.layers();
  const void* in = tokens_.data();
  for (size_t l = size_t(first_); l < layers.size(); ++l) {
    dscpp_decode_ctx c{};
    c.struct_size = sizeof(c);
    c.position = position;
    c.input = in;
    c.output = act_[l % 2].data();
    c.cache = caches_[l].data();
    c.workspace = workspace_.data();
    c.batch = n;
    if (first_ > 0) {
      c.memory = memory_.data();
      c.memory_len = memory_len_;
      c.memory_valid = static_cast<const int32_t*>(valid_.data());
    }
    runner_.decode(int(l), c);
    in = c.output;
  }
  logits.resize(size_t(n * vocab_));
  if (runner_.compute_dtype() == DType::f32) {
    device_.copy_to_host(logits.data(), in, logits.size() * 4);
  } else {
    std::vector<char> raw(logits.size() * dtype_size(runner_.compute_dtype()));
    device_.copy_to_host(raw.data(), in, raw.size());
    convert(raw.data(), runner_.compute_dtype(), logits.data(), DType::f32, logits.size());
  }
}

void Decoder::reorder(const std::vector<int64_t>& from) {
  const int64_t n = static_cast<int64_t>(from.size());
  bool identity = true;
  for (int64_t i = 0; i < n; ++i) identity = identity && from[size_t(i)] == i;
  if (identity) return;
  const std::vector<LayerDecl>& layers = plugin_.layers();
  for (size_t l = size_t(first_); l < layers.size(); ++l) {
    const size_t bytes = size_t(layers[l].decode_cache_bytes);
    if (bytes == 0) continue;
    auto* cache = static_cast<char*>(caches_[l].data());
    auto* scratch = static_cast<char*>(reorder_scratch_.data());
    device_.copy(scratch, cache, bytes * size_t(n));
    for (int64_t i = 0; i < n; ++i)
      device_.copy(cache + size_t(i) * bytes, scratch + size_t(from[size_t(i)]) * bytes, bytes);
  }
}

std::vector<std::vector<int32_t>> continue_prompts(Decoder& decoder, const Plugin& plugin,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const SearchOptions& options,
                                                   const std::function<void()>& before_step) {
  SearchModel model;
  model.vocab = decoder.vocab();
  model.step = [&](const std::vector<int32_t>& t, int64_t pos, std::vector<float>& l) {
    if (before_step) before_step();
    decoder.step(t, pos, l);
  };
  model.reorder = [&](const std::vector<int64_t>& from) { decoder.reorder(from); };
  const EncoderDecl& enc = plugin.encoder();
  if (enc.layers > 0) {
    decoder.encode(prompts, options.num_beams);
    return search(model, int64_t(prompts.size()), enc.decoder_start_id, options);
  }
  if (int64_t(prompts.size()) > decoder.capacity())
    fail("generate: {} prompts for a decoder of {} sequences", prompts.size(), decoder.capacity());
  for (const std::vector<int32_t>& p : prompts)
    if (p.empty() || int64_t(p.size()) >= decoder.positions())
      fail("generate: a prompt of {} tokens; the model's context holds {} (its --context)", p.size(),
           decoder.positions());
  SearchOptions o = options;
  o.first_position = 0;
  o.positions = decoder.positions();
  return search_prompts(model, prompts, o);
}

}  // namespace dscpp::runtime
