#include "runtime/tools/zero_generate.h"

#include "core/error.h"
#include "core/log.h"
#include "runtime/train/decoder.h"
#include "runtime/train/generation.h"
#include "runtime/train/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace dscpp::runtime {
int run_zero_generate(const GenerateOptions& o, const Plugin& plugin, Device& device,
                      const Engine::Inference& inf) {
  if (o.check_decode) fail("generate: --check_decode runs on one rank (dscpp generate), not with a config");
  if (o.temperature > 0) fail("generate: with a config, generation is greedy or beam search (no --temperature)");
  if (!plugin.can_decode())
    fail("model plugin {} cannot decode one token at a time (no decode entry, or a layer without decode sizes)",
         plugin.name());
  comm::Communicator& world = inf.world;
  const int rank = world.rank(), ranks = world.size();
  const std::optional<tok::Tokenizer> tokenizer = find_tokenizer(o.tokenizer, plugin);
  const std::vector<Prompt> prompts = read_prompts(o, tokenizer ? &*tokenizer : nullptr);
  std::vector<const Prompt*> mine;
  for (size_t i = size_t(rank); i < prompts.size(); i += size_t(ranks)) mine.push_back(&prompts[i]);
  const EncoderDecl& enc = plugin.encoder();
  const bool seq2seq = enc.layers > 0;
  // Prompts decoded together: an encoder-decoder's sources also go through the encoder together,
  // which the runner sized for a micro-batch.
  const int64_t want = o.batch_size > 0 ? o.batch_size : kGenerateBatch,
                batch = seq2seq ? std::min(want, inf.micro_batch) : want;
  const int64_t beams = std::max(1, o.num_beams);
  Decoder decoder(plugin, device, inf.runner, batch * beams);
  GenerateOptions eos_from_tokenizer = o;
  if (!seq2seq && tokenizer) eos_from_tokenizer.eos = tokenizer_eos(*tokenizer);
  const SearchOptions so = search_options(eos_from_tokenizer, plugin, decoder);
  std::vector<std::vector<int32_t>> ids;
  for (const Prompt* p : mine) ids.push_back(p->ids);
  const auto t0 = std::chrono::steady_clock::now();
  const SyncedGeneration g = generate_synced(decoder, plugin, inf.params, world, ids, batch, so);
  int64_t made = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    made += int64_t(g.outputs[i].size());
    const std::string text =
        tokenizer ? tokenizer->decode(g.outputs[i], true) : fmt::format("{}", fmt::join(g.outputs[i], ","));
    std::printf("%s", fmt::format("rank{}:\n   in={}\n  out={}\n", rank, mine[i]->shown, text).c_str());
  }
  std::fflush(stdout);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(
      "generated {} tokens for {} prompt(s) of {} in {:.2f} s ({:.1f} tokens/s on this rank, {} decode steps, {})",
      made, mine.size(), prompts.size(), secs, double(made) / std::max(secs, 1e-9), g.steps,
      beams > 1 ? fmt::format("{} beams", beams) : std::string("greedy"));
  return 0;
}

}  // namespace dscpp::runtime
