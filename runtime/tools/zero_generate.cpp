#include "runtime/tools/zero_generate.h"

#include "core/error.h"
#include "core/log.h"
#include "runtime/tools/decoder.h"
#include "runtime/tools/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace dscpp::runtime {
namespace {

// Before every decode step of any rank, each rank says whether it decodes one (and then does, while
// the others follow its gathers); when none does, all stop together.
int64_t still_decoding(comm::Communicator& world, bool mine) {
  int64_t n = mine ? 1 : 0;
  world.allreduce(&n, 1, DType::i64, comm::ReduceOp::sum);
  return n;
}

}  // namespace

int run_zero_generate(const GenerateOptions& o, const Plugin& plugin, Device& device,
                      const Engine::Inference& inf) {
  if (o.check_decode) fail("generate: --check_decode runs on one rank (dscpp generate), not with a config");
  if (o.temperature > 0) fail("generate: with a config, generation is greedy or beam search (no --temperature)");
  if (!plugin.can_decode())
    fail("model plugin {} cannot decode one token at a time (no decode entry, or a layer without decode sizes)",
         plugin.name());
  comm::Communicator& world = inf.world;
  const int rank = world.rank(), ranks = world.size();
  const std::optional<tok::Tokenizer> tokenizer = find_tokenizer(o, plugin);
  const std::vector<Prompt> prompts = read_prompts(o, tokenizer ? &*tokenizer : nullptr);
  std::vector<const Prompt*> mine;
  for (size_t i = size_t(rank); i < prompts.size(); i += size_t(ranks)) mine.push_back(&prompts[i]);
  const EncoderDecl& enc = plugin.encoder();
  const bool seq2seq = enc.layers > 0;
  // A decoder continues one prompt after another; an encoder-decoder a batch at a time.
  const int64_t batch = seq2seq ? std::max<int64_t>(1, std::min(o.batch_size, inf.micro_batch)) : 1;
  const int64_t beams = std::max(1, o.num_beams);
  Decoder decoder(plugin, device, inf.runner, batch * beams);
  GenerateOptions eos_from_tokenizer = o;
  if (!seq2seq && tokenizer) eos_from_tokenizer.eos = tokenizer_eos(*tokenizer);
  const SearchOptions so = search_options(eos_from_tokenizer, plugin, decoder);
  // Every rank runs as many chunks as the rank with the most prompts (rank 0: prompt i goes to
  // rank i mod N), each an encoder pass and rounds of decode steps until no rank decodes.
  const int64_t share = (int64_t(prompts.size()) + ranks - 1) / ranks;
  const int64_t chunks = seq2seq ? (share + batch - 1) / batch : 1;
  const int layers = static_cast<int>(plugin.layers().size());
  const auto t0 = std::chrono::steady_clock::now();
  int64_t made = 0, steps = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<std::vector<int32_t>> ids;
    std::vector<const Prompt*> chunk;
    for (int64_t i = c * batch; i < int64_t(mine.size()) && (seq2seq ? i < (c + 1) * batch : true); ++i) {
      chunk.push_back(mine[size_t(i)]);
      ids.push_back(mine[size_t(i)]->ids);
    }
    std::vector<std::vector<int32_t>> out;
    if (!chunk.empty()) {
      out = continue_prompts(decoder, plugin, ids, so, [&] {
        ++steps;
        still_decoding(world, true);
      });
    } else if (seq2seq) {
      inf.params.follow_forward(0, enc.layers);  // the others' encoder pass
    }
    // This rank is done with the chunk; the others may still decode: follow their steps.
    while (still_decoding(world, false) > 0) inf.params.follow_forward(enc.layers, layers);
    for (size_t i = 0; i < chunk.size(); ++i) {
      made += int64_t(out[i].size());
      std::string text = fmt::format("{}", fmt::join(out[i], ","));
      if (tokenizer) text = tokenizer->decode(out[i], true);
      std::printf("%s", fmt::format("rank{}:\n   in={}\n  out={}\n", rank, chunk[i]->shown, text).c_str());
    }
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("generated {} tokens for {} prompt(s) of {} in {:.2f} s ({:.1f} tokens/s on this rank, {} decode steps, {})",
            made, mine.size(), prompts.size(), secs, double(made) / std::max(secs, 1e-9), steps,
            beams > 1 ? fmt::format("{} beams", beams) : std::string("greedy"));
  return 0;
}

}  // namespace dscpp::runtime
