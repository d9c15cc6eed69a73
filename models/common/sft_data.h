// Supervised fine-tuning data for the causal language models: examples whose loss is taken only
// on the answer, read from JSON lines (plain or gzip-compressed). Each line is one of:
//   {"prompt": "...", "completion": "..."}   tokenized with the model's tokenizer: the prompt as
//                                            tokenizer(prompt) (with the special tokens its
//                                            post-processor adds, e.g. Llama's <s>), the completion
//                                            as tokenizer(completion, add_special_tokens=False),
//                                            then the end-of-sequence token; the loss is taken on
//                                            the completion's tokens and that last one (TRL's
//                                            completion-only loss)
//   {"input_ids": [...], "labels": [...]}    already tokenized, transformers' convention: labels
//                                            as long as input_ids, -100 where no loss is taken
//                                            (the model predicts labels[i] from the tokens before i)
//   {"messages": [...]}                      refused by name: a chat template is a Jinja program,
//                                            which this reader does not run; apply it and give
//                                            prompt/completion, or token ids
// Samples are an example each (padded after its last token, no loss on padding), or with packing
// as many whole examples as fit in context+1 tokens, each attending only to itself with its own
// positions, so every example's loss is counted once and as it would be alone.
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::models {

struct SftOptions {
  int64_t vocab_size = 0;  // every id must be below it (labels' -100 aside)
  int32_t eos = -1;        // the end-of-sequence token after a completion; < 0: text lines refused
  int threads = 1;
};

struct SftExample {
  std::vector<int32_t> ids, labels;  // labels[i]: the token predicted at i (from ids[0, i)), or -100
};

// Fails naming the file and line; a text line needs `tokenizer`.
std::vector<SftExample> read_sft(const std::string& path, const SftOptions& opt, const tok::Tokenizer* tokenizer);

// SFT examples as the samples of a causal language model of `context` positions: inputs [ids]
// or, packed, [ids | positions | first keys] (layers::Env::documents); targets -1 where no loss.
class SftSamples {
 public:
  // `truncate`: an example longer than context+1 tokens is cut to it (else an error naming it).
  SftSamples(const std::string& family, std::vector<SftExample> train, std::vector<SftExample> eval, int64_t context,
             bool packing, bool truncate, int32_t pad);
  int64_t train_size() const { return int64_t(train_.size()); }
  int64_t eval_size() const { return int64_t(eval_.size()); }
  void load(int32_t split, int64_t index, void* input, int32_t* target) const;
  std::string summary() const;

 private:
  // A sample: examples [first, end) of its split.
  struct Window {
    size_t first, end;
  };
  std::vector<Window> windows(const std::vector<SftExample>& examples) const;

  std::string family_;
  std::vector<SftExample> train_examples_, eval_examples_;
  std::vector<Window> train_, eval_;
  int64_t context_;
  bool packing_;
  int32_t pad_;
  int64_t truncated_ = 0, loss_tokens_ = 0;
};

}  // namespace dscpp::models
