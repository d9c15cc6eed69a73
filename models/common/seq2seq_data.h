// Sequence-to-sequence examples (a source and a target) as Hugging Face's run_translation.py and
// run_summarization.py prepare them, read from JSON lines (plain or gzip-compressed; a .json file
// holding JSON lines too). Each line is one of:
//   {"translation": {"en": "...", "ro": "..."}}    source_lang and target_lang name the keys; a
//                                                  code with a region ("en_XX") reads the key
//                                                  before the "_", as run_translation does
//   {"text": "...", "summary": "..."}              text_column and summary_column name the keys;
//                                                  a pair whose text or summary is null or empty is
//                                                  skipped, as run_summarization skips it
//   {"input_ids": [...], "labels": [...]}         already tokenized; an "attention_mask" must be
//                                                  ones then zeros, as long as input_ids, and cuts
//                                                  input_ids to its ones; labels may hold -100
// A text pair becomes tokenizer(source_prefix + source, max_length=max_source_length,
// truncation=True) and tokenizer(text_target=target, max_length=max_target_length,
// truncation=True): both sides carry the special tokens the post-processor adds (T5: a final
// </s>), and truncation cuts the text's tokens, keeping those (on the side tokenizer_config.json's
// truncation_side names). Without `truncation` a longer example is an error instead, and already
// tokenized examples are never cut. Blank lines are skipped; every error names the file and line.
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::models {

struct Seq2SeqOptions {
  std::string source_lang, target_lang;     // translation
  std::string text_column, summary_column;  // summarization
  std::string source_prefix;                // before every source text (T5: "translate English to Romanian: ")
  int64_t max_source_length = 1024, max_target_length = 128;
  bool truncation = false;  // false: an example longer than a maximum is an error
  int64_t vocab_size = 0;   // > 0: every id must be below it (labels' -100 aside)
  int threads = 1;          // text lines are tokenized on this many threads
};

struct Seq2SeqExample {
  std::vector<int32_t> input_ids, labels;  // labels: -100 where no loss is taken
};

struct Seq2SeqCounts {
  int64_t examples = 0, skipped = 0;  // skipped: summarization pairs with an empty side
  int64_t truncated_sources = 0, truncated_targets = 0;
};

// Fails (a layers::Failure) naming the file and line; a text line needs `tokenizer`.
std::vector<Seq2SeqExample> read_seq2seq(const std::string& path, const Seq2SeqOptions& opt,
                                         const tok::Tokenizer* tokenizer, Seq2SeqCounts* counts = nullptr);

}  // namespace dscpp::models
