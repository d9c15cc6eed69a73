// `dscpp generate PLUGIN.so [--load_dir CKPT] (--prompt TEXT | --prompt_ids 1,2,3) [--max_new_tokens N]
// [--temperature T] [--top_k K] [--seed S] [--check_decode] [-- plugin args]` (the runtime's
// --generate): samples a continuation from a model's weights, one token at a time through the
// plugin's decode calls, each layer keeping its own cache (a KV cache for attention), so a token
// costs one pass over the new position instead of over the whole sequence.
//
// Weights: the checkpoint --load_dir names (any stage and world size), else the plugin's
// init_from (--from_hf), else its init rule. Single rank, fp32. --prompt is encoded by the
// model's tokenizer (--tokenizer, or the tokenizer.json of the --from_hf directory) with its
// special tokens, as `tokenizer(text)` does, the continuation printed as text token by token
// and stopped at the tokenizer's eos token, as transformers' generate stops; without a tokenizer
// the text is bytes (a byte-level model: vocabulary ≥ 256). --prompts FILE continues each line
// in turn; --prompt_ids takes token ids. Temperature 0 (the default) is greedy: the first largest logit.
// --check_decode also runs the training forward on the sequence so far at every step (causal:
// later positions do not matter) and fails unless its logits at the new position equal the
// decode's within 1e-4 of their largest magnitude.
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct GenerateOptions {
  std::string model;
  std::vector<std::string> plugin_args;
  std::string device = "cpu";
  std::string load_dir;
  std::string prompt;                // text (through the tokenizer, else as bytes)
  std::string prompts_file;          // or one prompt per line
  std::vector<int32_t> prompt_ids;   // or ids
  std::vector<std::vector<int32_t>> more_prompt_ids;  // an encoder-decoder's further sources
  std::string tokenizer;             // a tokenizer directory; "" = the plugin's init_from directory's, if any
  int64_t max_new_tokens = 32;
  double temperature = 0;
  int64_t top_k = 0;                 // 0: the whole vocabulary
  uint64_t seed = 42;
  bool check_decode = false;
  // Encoder-decoders: beam search (transformers' num_beams, length_penalty, early_stopping).
  int num_beams = 1;
  double length_penalty = 1.0;
  bool early_stopping = false;
  // Prompts decoded together (0: an encoder-decoder's 8; a decoder's one at a time, streamed).
  int64_t batch_size = 0;
  int32_t eos = -1;  // a decoder's end token (from its tokenizer; an encoder-decoder's comes from the model)
};

int run_generate(const GenerateOptions& options);

class Decoder;
class Plugin;
struct SearchOptions;
// The prompts the options give, each continued on its own: --prompt_ids (and the prompts after its
// ';'), then --prompt or each line of --prompts through the tokenizer with its special tokens
// (without one, as bytes).
struct Prompt {
  std::string shown;  // as the user gave it
  std::vector<int32_t> ids;
  bool text = false;  // a text (else ids)
};
std::vector<Prompt> read_prompts(const GenerateOptions& options, const tok::Tokenizer* tokenizer);
// Prompts decoded together unless --batch_size says (an encoder-decoder's, and any under ZeRO-Inference).
inline constexpr int64_t kGenerateBatch = 8;
// The prompts decoded together: --batch_size, else the family's default.
int64_t gen_batch(const GenerateOptions& options, const Plugin& plugin);
// The search the options ask for, within what the decoder holds.
SearchOptions search_options(const GenerateOptions& options, const Plugin& plugin, const Decoder& decoder);

}  // namespace dscpp::runtime
