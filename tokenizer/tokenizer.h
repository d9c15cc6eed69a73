// A Hugging Face tokenizer read from its directory (tokenizer.json, and tokenizer_config.json
// for what transformers adds on top), encoding and decoding exactly as
// `transformers.AutoTokenizer` (the fast tokenizer) does. Components it cannot run exactly are
// refused when the file is loaded, naming the component and its JSON path.
#pragma once

#include "tokenizer/components.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class Tokenizer {
 public:
  // `path`: a directory holding tokenizer.json, or the tokenizer.json file itself.
  static Tokenizer load(const std::string& path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // `text` must be UTF-8 (as a Python str is); invalid sequences are refused with their byte offset.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // transformers' decode: skip_special_tokens drops the special added tokens; the text is
  // cleaned up (" ." → ".", ...) when tokenizer_config.json asks for it (its default: yes).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // What the post-processor puts before and after a single sequence when add_special_tokens is
  // set. transformers' truncation cuts only the text's ids between them, so a caller cutting to a
  // maximum length needs them apart from the text's.
  const std::vector<int32_t>& special_prefix() const { return prefix_; }
  const std::vector<int32_t>& special_suffix() const { return suffix_; }
  // tokenizer_config.json's truncation_side is "left": truncation keeps a text's last ids.
  bool truncates_left() const { return truncate_left_; }

  int32_t token_to_id(std::string_view token) const;  // -1 when unknown
  std::string id_to_token(int32_t id) const;          // "" when unknown
  size_t vocab_size() const;                          // the model's vocabulary and the added tokens
  const std::string& source() const { return file_; }

 private:
  Tokenizer() = default;
  // Splits `text` at the added tokens (raw or normalized), as the `tokenizers` AddedVocabulary does.
  void split_added(std::string_view text, bool normalized, std::vector<std::pair<std::string, int32_t>>& out) const;

  std::string file_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;      // longest content first (leftmost-longest matching)
  std::vector<int32_t> prefix_, suffix_;  // what the post-processor adds around a single sequence
  bool clean_up_spaces_ = true;
  bool truncate_left_ = false;
};

}  // namespace dscpp::tok
