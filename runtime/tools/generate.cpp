#include "runtime/tools/generate.h"

#include "core/error.h"
#include "core/log.h"
#include "device/device_select.h"
#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"
#include "runtime/rank_device.h"
#include "runtime/tools/model_weights.h"
#include "runtime/train/decoder.h"
#include "runtime/train/generation.h"
#include "runtime/train/layer_runner.h"
#include "runtime/train/search.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>

namespace dscpp::runtime {
namespace {

// The next token from logits: the first largest with temperature 0, else a draw from
// softmax(logits / T) over the top_k largest (all when 0).
int32_t sample(const std::vector<float>& logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = top_k > 0 ? std::min(order.size(), static_cast<size_t>(top_k)) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  std::vector<double> w(k);
  const double top = logits[size_t(order[0])];
  for (size_t i = 0; i < k; ++i) w[i] = std::exp((logits[size_t(order[i])] - top) / temperature);
  std::discrete_distribution<size_t> pick(w.begin(), w.end());
  return order[pick(rng)];
}

std::string printable(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (id == '\n' || (id >= 32 && id < 127)) s.push_back(static_cast<char>(id));
    else s += fmt::format("\\x{:02x}", id & 0xff);
  }
  return s;
}

}  // namespace

std::vector<Prompt> read_prompts(const GenerateOptions& o, const tok::Tokenizer* tokenizer) {
  std::vector<Prompt> out;
  if (!o.prompt_ids.empty()) {
    out.push_back({fmt::format("{}", fmt::join(o.prompt_ids, ",")), o.prompt_ids});
    for (const std::vector<int32_t>& ids : o.more_prompt_ids)
      out.push_back({fmt::format("{}", fmt::join(ids, ",")), ids});
  }
  std::vector<std::string> texts;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in) fail("--prompts {}: cannot read it", o.prompts_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
    if (texts.empty()) fail("--prompts {}: no prompt in it (one per line)", o.prompts_file);
  } else if (!o.prompt.empty()) {
    texts.push_back(o.prompt);
  }
  for (const std::string& t : texts) {
    Prompt p{t, {}, true};
    if (tokenizer) p.ids = tokenizer->encode(t, true);
    else
      for (unsigned char ch : t) p.ids.push_back(ch);
    out.push_back(std::move(p));
  }
  if (out.empty()) fail("generate: give a prompt (--prompt TEXT, --prompts FILE or --prompt_ids 1,2,3)");
  return out;
}

SearchOptions search_options(const GenerateOptions& o, const Plugin& plugin, const Decoder& decoder) {
  const EncoderDecl& enc = plugin.encoder();
  SearchOptions so;
  so.max_new_tokens = o.max_new_tokens;
  so.num_beams = std::max(1, o.num_beams);
  so.length_penalty = o.length_penalty;
  so.early_stopping = o.early_stopping;
  so.eos = enc.layers > 0 ? enc.eos_id : o.eos;
  so.pad = enc.pad_id >= 0 ? enc.pad_id : 0;
  if (enc.layers > 0 && so.max_new_tokens > decoder.positions()) {
    log::info("--max_new_tokens {}: the decoder holds {} positions (the plugin's --max_target_length); generating at "
              "most that many",
              o.max_new_tokens, decoder.positions());
    so.max_new_tokens = decoder.positions();
  }
  return so;
}

int64_t gen_batch(const GenerateOptions& o, const Plugin& plugin) {
  if (o.batch_size > 0) return o.batch_size;
  return plugin.encoder().layers > 0 ? kGenerateBatch : 1;
}

namespace {

// Prompts decoded together, --batch_size at a time, printed per batch: an encoder-decoder's (each
// prompt a source, encoded once, decoded from the model's decoder start token, greedy or beams),
// and a decoder's with --batch_size above 1 (greedy).
int generate_together(const GenerateOptions& o, const Plugin& plugin, Device& device, LayerRunner& runner,
                      const std::vector<Prompt>& prompts, const tok::Tokenizer* tokenizer) {
  const bool seq2seq = plugin.encoder().layers > 0;
  if (o.check_decode)
    fail(
        "generate: --check_decode follows one sequence of a decoder{}",
        seq2seq ? fmt::format(" (model plugin {} is an encoder-decoder)", plugin.name()) : " (leave out --batch_size)");
  if (o.temperature > 0)
    fail("generate: {} decodes greedily or with --num_beams, not by sampling",
         seq2seq ? "an encoder-decoder" : "--batch_size above 1");
  const int64_t beams = std::max(1, o.num_beams), batch = gen_batch(o, plugin);
  Decoder decoder(plugin, device, runner, batch * beams);
  const SearchOptions so = search_options(o, plugin, decoder);
  for (size_t first = 0; first < prompts.size(); first += size_t(batch)) {
    const size_t count = std::min(prompts.size() - first, size_t(batch));
    std::vector<std::vector<int32_t>> chunk;
    for (size_t i = first; i < first + count; ++i) chunk.push_back(prompts[i].ids);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::vector<int32_t>> out = continue_prompts(decoder, plugin, chunk, so);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t made = 0;
    for (size_t i = 0; i < count; ++i) {
      made += out[i].size();
      std::printf("%s", fmt::format("prompt: {}\n", prompts[first + i].shown).c_str());
      if (tokenizer) std::printf("%s", fmt::format("output: {}\n", tokenizer->decode(out[i], true)).c_str());
      std::printf("%s", fmt::format("ids: {}\n", fmt::join(out[i], ",")).c_str());
    }
    std::printf("%s", fmt::format("generated {} tokens for {} prompt(s) in {:.3f} s ({:.1f} tokens/s, {} on {})\n",
                                  made, count, secs, double(made) / std::max(secs, 1e-9),
                                  beams > 1 ? fmt::format("{} beams", beams) : std::string("greedy"), device.name())
                          .c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  // One rank and no world: the backend matters only as DSCPP_COMM_BACKEND names it (sharing a GPU).
  RankDevice rd = make_rank_device(parse_device_choice(o.device), comm_backend_setting(""));
  Device& device = *rd.device;
  rd.ops.dtype = DSCPP_F32;
  Plugin plugin(o.model);
  plugin.create(o.plugin_args, standalone_host(device.name(), o.seed));
  if (!plugin.can_decode())
    fail("model plugin {} cannot decode one token at a time (no decode entry, or a layer without decode sizes): "
         "dscpp generate needs it",
         plugin.name());
  const std::vector<LayerDecl>& layers = plugin.layers();
  const int64_t vocab = layers.back().decode_output_numel;
  const std::optional<tok::Tokenizer> tokenizer = find_tokenizer(o.tokenizer, plugin);
  const int32_t eos = tokenizer ? tokenizer_eos(*tokenizer) : -1;
  const std::vector<Prompt> prompts = read_prompts(o, tokenizer ? &*tokenizer : nullptr);
  for (const Prompt& p : prompts)
    for (int32_t t : p.ids)
      if (t < 0 || t >= vocab) fail("generate: prompt token {} is outside the vocabulary of {}", t, vocab);
  if (tokenizer && tokenizer->vocab_size() > static_cast<size_t>(vocab))
    fail("generate: the tokenizer {} has {} tokens, more than the model's vocabulary of {}", tokenizer->source(),
         tokenizer->vocab_size(), vocab);

  const int64_t context = plugin.data().tokens_per_sample;
  if (plugin.data().input_dtype != DSCPP_I32 || context <= 0)
    fail("generate: model plugin {} does not take token ids (its samples are {} {} for {} tokens)", plugin.name(),
         plugin.data().input_numel, plugin.data().input_dtype == DSCPP_I32 ? "int32" : "floats", context);
  // --check_decode runs the training forward on the prompt as a sample of ids alone.
  if (o.check_decode && plugin.encoder().layers == 0 && plugin.data().input_numel != context)
    fail("generate: --check_decode needs samples of token ids alone, but model plugin {}'s carry more ({} int32 for "
         "{} tokens: positions and first keys for packed documents or a sliding window); leave out plugin arguments "
         "such as --reset_attention_mask, or --check_decode",
         plugin.name(), plugin.data().input_numel, context);
  const FlatLayout layout = make_flat_layout(layers);
  const std::vector<float> weights = model_weights(plugin, layout, o.seed, o.load_dir);
  DeviceBuffer params(device, static_cast<size_t>(layout.total) * 4, MemCategory::params);
  device.copy_from_host(params.data(), weights.data(), weights.size() * 4);
  if (plugin.encoder().layers > 0 || o.batch_size > 1) {
    LayerRunner runner(plugin, device, rd.ops, layout, gen_batch(o, plugin));
    runner.bind(params.data(), nullptr);
    return generate_together(o, plugin, device, runner, prompts, tokenizer ? &*tokenizer : nullptr);
  }
  if (o.num_beams > 1) fail("generate: --num_beams is for encoder-decoders; model plugin {} decodes one sequence",
                            plugin.name());
  // The decoder's parameters, and the training forward for --check_decode (one sequence of the context).
  LayerRunner runner(plugin, device, rd.ops, layout, 1);
  runner.bind(params.data(), nullptr);
  Decoder decoder(plugin, device, runner, 1);
  DeviceBuffer window;
  if (o.check_decode) window = DeviceBuffer(device, size_t(context) * 4, MemCategory::buffers);
  double worst = 0;

  // Logits of the token at `position` (the last layer's decode output), on the host.
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> tokens;  // the sequence so far
  auto step = [&](int32_t id, int64_t position) {
    decoder.step({id}, position, logits);
    if (!o.check_decode) return;
    std::vector<int32_t> ids(static_cast<size_t>(context), 0);
    std::copy_n(tokens.begin(), std::min<size_t>(tokens.size(), size_t(context)), ids.begin());
    device.copy_from_host(window.data(), ids.data(), ids.size() * 4);
    runner.forward(window.data(), nullptr, 1, false, o.seed);
    std::vector<float> full(static_cast<size_t>(vocab));
    device.copy_to_host(full.data(), static_cast<const float*>(runner.last_output()) + position * vocab,
                        full.size() * 4);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      diff = std::max(diff, double(std::fabs(full[i] - logits[i])));
      scale = std::max(scale, double(std::fabs(full[i])));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  };

  std::mt19937_64 rng(o.seed);
  // One prompt after another through the same caches: a position's cache entries are written
  // before any later position reads them, so a new prompt needs no cleared cache.
  for (const Prompt& pr : prompts) {
    tokens = pr.ids;
    if (tokens.empty()) fail("generate: an empty prompt");
    if (int64_t(tokens.size()) > context)
      fail("generate: a prompt of {} tokens does not fit the model's context of {} (its --context)", tokens.size(),
           context);
    if (tokenizer)
      std::printf("%s", fmt::format("prompt: {}\ncontinuation: ", pr.text ? pr.shown : tokenizer->decode(tokens))
                            .c_str());
    std::fflush(stdout);
    const size_t prompt = tokens.size();
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t p = 0; p < prompt; ++p) step(tokens[p], int64_t(p));
    std::vector<int32_t> generated;
    std::string shown;  // the decoded continuation printed so far (streamed as it grows)
    bool full = false, stopped = false;
    for (int64_t n = 0; n < o.max_new_tokens; ++n) {
      const int32_t next = sample(logits, o.temperature, o.top_k, rng);
      generated.push_back(next);
      tokens.push_back(next);
      if (tokenizer) {
        const std::string text = tokenizer->decode(generated, true);
        // Print only once the text is whole: a token may end inside a multi-byte character.
        if (text.size() >= shown.size() && text.compare(0, shown.size(), shown) == 0 &&
            text.find("\uFFFD", shown.size()) == std::string::npos) {
          std::fputs(text.substr(shown.size()).c_str(), stdout);
          std::fflush(stdout);
          shown = text;
        }
      }
      if (next == eos) {
        stopped = true;
        break;
      }
      if (n + 1 == o.max_new_tokens) break;
      if (int64_t(tokens.size()) > context) {  // the new token's position would be past the caches' `context`
        full = true;
        break;
      }
      step(next, int64_t(tokens.size()) - 1);
    }
    if (tokenizer) std::printf("%s\n", tokenizer->decode(generated, true).substr(shown.size()).c_str());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s",
                fmt::format("generated {} tokens after a prompt of {} in {:.3f} s ({:.1f} tokens/s, {} on {}{}):\n"
                            "ids: {}\n",
                            generated.size(), prompt, secs, double(tokens.size() - 1) / std::max(secs, 1e-9),
                            o.temperature > 0 ? fmt::format("temperature {}, top_k {}", o.temperature, o.top_k)
                                              : std::string("greedy"),
                            device.name(), stopped ? ", stopped at the eos token" : "", fmt::join(generated, ","))
                    .c_str());
    if (full)
      std::printf("%s", fmt::format("stopped at the model's context of {} positions (--context sizes the caches)\n",
                                    context)
                            .c_str());
    if (!tokenizer && pr.text) std::printf("text: %s\n", printable(generated).c_str());
  }
  if (o.check_decode) {
    const bool ok = worst <= 1e-4;
    std::printf("%s", fmt::format("check_decode: decode logits vs the training forward at every step: max difference "
                                  "{:.2e} of the largest logit: {}\n",
                                  worst, ok ? "ok" : "FAILED")
                          .c_str());
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace dscpp::runtime
