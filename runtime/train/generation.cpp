#include "runtime/train/generation.h"

#include "core/error.h"
#include "metrics/bleu.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace dscpp::runtime {

std::optional<tok::Tokenizer> find_tokenizer(const std::string& dir, const Plugin& plugin) {
  namespace fs = std::filesystem;
  if (!dir.empty()) return tok::Tokenizer::load(dir);
  const std::string from = plugin.init_from();
  if (!from.empty() && fs::is_directory(from) && fs::exists(fs::path(from) / "tokenizer.json"))
    return tok::Tokenizer::load(from);
  return std::nullopt;
}

int32_t tokenizer_eos(const tok::Tokenizer& t) {
  const auto config = std::filesystem::path(t.source()).parent_path() / "tokenizer_config.json";
  std::ifstream in(config);
  if (!in) return -1;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("eos_token")) return -1;
  const auto& e = j["eos_token"];
  return t.token_to_id(e.is_string() ? e.get<std::string>() : e.is_object() ? e.value("content", "") : "");
}

namespace {

// Said before every decode step of any rank: whether this rank decodes one; all see the sum.
int64_t decoding(comm::Communicator& world, bool mine) {
  int64_t n = mine ? 1 : 0;
  world.allreduce(&n, 1, DType::i64, comm::ReduceOp::sum);
  return n;
}

}  // namespace

SyncedGeneration generate_synced(Decoder& decoder, const Plugin& plugin, const ModelParams& params,
                                 comm::Communicator& world, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t batch, const SearchOptions& options) {
  const EncoderDecl& enc = plugin.encoder();
  const bool seq2seq = enc.layers > 0;
  int64_t most = static_cast<int64_t>(prompts.size());
  if (world.size() > 1) world.allreduce(&most, 1, DType::i64, comm::ReduceOp::max);
  const int layers = static_cast<int>(plugin.layers().size());
  SyncedGeneration g;
  for (int64_t first = 0; first < most; first += batch) {
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(prompts.size()), first + batch);
    std::vector<std::vector<int32_t>> chunk;
    for (int64_t i = first; i < end; ++i) chunk.push_back(prompts[size_t(i)]);
    if (!chunk.empty()) {
      std::vector<std::vector<int32_t>> out = continue_prompts(decoder, plugin, chunk, options, [&] {
        ++g.steps;
        if (world.size() > 1) decoding(world, true);
      });
      for (auto& o : out) g.outputs.push_back(std::move(o));
    } else if (seq2seq) {
      params.follow_forward(0, enc.layers);  // the others' encoder pass
    }
    // Done with this batch; the others may still decode: follow their steps until none does.
    if (world.size() > 1)
      while (decoding(world, false) > 0) params.follow_forward(enc.layers, layers);
  }
  return g;
}

void evaluate_generation(const ForwardPasses& f, const GenerationEval& o, EvalResult& r) {
  const EncoderDecl& enc = f.plugin.encoder();
  if (enc.layers == 0) fail("--predict_with_generate: model {} is not an encoder-decoder", f.plugin.name());
  if (!f.plugin.can_decode()) fail("--predict_with_generate: model {} cannot decode", f.plugin.name());
  const dscpp_data_desc& d = f.plugin.data();
  const std::optional<tok::Tokenizer> tokenizer = find_tokenizer(o.tokenizer, f.plugin);
  // This rank's eval samples, as evaluate() takes them: sources and labels from the samples.
  std::vector<std::vector<int32_t>> sources, labels;
  std::vector<int32_t> input(static_cast<size_t>(d.input_numel)), target(static_cast<size_t>(d.target_numel));
  for (int64_t i = f.world.rank(); i < d.eval_size; i += f.world.size()) {
    f.plugin.load_sample(1, i, input.data(), target.data());
    const int32_t len = std::clamp<int32_t>(input[size_t(enc.len)], 1, static_cast<int32_t>(enc.len));
    sources.emplace_back(input.begin(), input.begin() + len);
    labels.emplace_back();
    for (int32_t t : target)
      if (t >= 0) labels.back().push_back(t);
  }
  const int64_t beams = std::max(1, o.num_beams);
  Decoder decoder(f.plugin, f.device, f.runner, f.micro * beams);
  SearchOptions so;
  so.num_beams = int(beams);
  so.max_new_tokens = o.max_new_tokens > 0 ? std::min(o.max_new_tokens, decoder.positions()) : decoder.positions();
  so.eos = enc.eos_id;
  so.pad = enc.pad_id >= 0 ? enc.pad_id : 0;
  f.params.begin_pass(false, false);
  const SyncedGeneration g = generate_synced(decoder, f.plugin, f.params, f.world, sources, f.micro, so);
  f.params.release_all();
  // What compute_metrics compares: both sides decoded without special tokens, stripped.
  auto text = [&](const std::vector<int32_t>& ids) {
    std::string s = tokenizer ? tokenizer->decode(ids, true) : fmt::format("{}", fmt::join(ids, " "));
    const size_t b = s.find_first_not_of(" \t\n\r"), e = s.find_last_not_of(" \t\n\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  metrics::Bleu bleu;
  int64_t gen_tokens = 0;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string ref = text(labels[i]);
    bleu.add(text(g.outputs[i]), {ref});
    for (int32_t t : g.outputs[i]) gen_tokens += t != so.pad ? 1 : 0;
  }
  auto flat = bleu.stats().flat();
  std::vector<int64_t> sums(flat.begin(), flat.end());
  sums.push_back(gen_tokens);
  sums.push_back(static_cast<int64_t>(g.outputs.size()));
  if (f.world.size() > 1) f.world.allreduce(sums.data(), sums.size(), DType::i64);
  std::copy_n(sums.begin(), flat.size(), flat.begin());
  metrics::Bleu total;
  total.add_stats(metrics::BleuStats::from_flat(flat));
  r.bleu = total.score().score;
  r.gen_len = sums.back() > 0 ? double(sums[flat.size()]) / double(sums.back()) : 0;
}

}  // namespace dscpp::runtime
