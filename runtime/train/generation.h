// Generation on every rank at once, and evaluation with it (Seq2SeqTrainer's
// predict_with_generate): each rank continues its own prompts while, at ZeRO stage 3, every layer's
// gather is a collective, so every rank joins every encoder pass and decode step until the last
// rank's last prompt is done (DeepSpeed's generate(synced_gpus=True)): before each decode step
// the ranks say whether they decode one, and a rank with nothing left follows the others' gathers
// without computing; when none decodes, all stop together.
#pragma once

#include "collectives/communicator.h"
#include "runtime/model/plugin.h"
#include "runtime/train/decoder.h"
#include "runtime/train/forward_passes.h"
#include "runtime/train/search.h"
#include "runtime/zero/model_params.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::runtime {

// The tokenizer prompts and outputs go through: `dir`, else the one beside the plugin's
// init_from weights (a Hugging Face directory holds tokenizer.json next to config.json).
std::optional<tok::Tokenizer> find_tokenizer(const std::string& dir, const Plugin& plugin);
// The end token tokenizer_config.json names, or −1.
int32_t tokenizer_eos(const tok::Tokenizer& tokenizer);

struct SyncedGeneration {
  std::vector<std::vector<int32_t>> outputs;  // this rank's, in its prompts' order
  int64_t steps = 0;                          // decode steps this rank computed
};

// Collective: continues this rank's `prompts`, `batch` at a time, every rank running as many
// batches as the rank with the most.
SyncedGeneration generate_synced(Decoder& decoder, const Plugin& plugin, const ModelParams& params,
                                 comm::Communicator& world, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t batch, const SearchOptions& options);

// Evaluation with generation: the eval split's sources continued, and sacreBLEU's corpus BLEU
// of the outputs against the labels (both decoded by the tokenizer without special tokens, as
// run_translation's compute_metrics does; without a tokenizer, ids as words).
struct GenerationEval {
  bool enabled = false;
  int num_beams = 1;
  int64_t max_new_tokens = 0;  // 0: the decoder's length (the plugin's --max_target_length)
  std::string tokenizer;       // a tokenizer directory; "" = the plugin's init_from directory's
};

// Collective; fills r.bleu and r.gen_len (the mean generated length, without padding).
void evaluate_generation(const ForwardPasses& f, const GenerationEval& options, EvalResult& r);

}  // namespace dscpp::runtime
