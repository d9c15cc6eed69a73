// The WordPiece model (BERT): each word split greedily into the longest vocabulary entries from
// the left, every piece after the first with the continuing-subword prefix ("##"); a word with a
// part no entry covers, or longer than max_input_chars_per_word characters, is the unk token.
#include "core/error.h"
#include "tokenizer/components.h"
#include "tokenizer/text.h"

namespace dscpp::tok {

namespace {

class WordPiece final : public Model {
 public:
  WordPiece(const nlohmann::json& j, const Where& w)
      : unk_(j.value("unk_token", std::string("[UNK]"))),
        prefix_(j.value("continuing_subword_prefix", std::string("##"))),
        max_chars_(j.value("max_input_chars_per_word", int64_t{100})) {
    for (const auto& [token, id] : j.at("vocab").items()) {
      vocab_[token] = id.get<int32_t>();
      if (static_cast<size_t>(id.get<int32_t>()) >= tokens_.size())
        tokens_.resize(static_cast<size_t>(id.get<int32_t>()) + 1);
      tokens_[static_cast<size_t>(id.get<int32_t>())] = token;
    }
    const auto it = vocab_.find(unk_);
    if (it == vocab_.end()) refuse(w / "unk_token", "\"" + unk_ + "\" is not in the vocabulary");
    unk_id_ = it->second;
  }

  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override {
    int64_t chars = 0;
    for (size_t i = 0, n = 0; i < word.size(); i += n, ++chars) next_code_point(word, i, &n);
    if (chars > max_chars_) return ids.push_back(unk_id_);
    std::vector<int32_t> pieces;
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      int32_t found = -1;
      while (start < end) {
        const std::string piece = (start > 0 ? prefix_ : std::string()) + std::string(word.substr(start, end - start));
        if (const auto it = vocab_.find(piece); it != vocab_.end()) {
          found = it->second;
          break;
        }
        do --end;  // one whole character less
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) return ids.push_back(unk_id_);
      pieces.push_back(found);
      start = end;
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  const std::unordered_map<std::string, int32_t>& vocab() const override { return vocab_; }
  const std::string* token(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() && vocab_.count(tokens_[static_cast<size_t>(id)])
               ? &tokens_[static_cast<size_t>(id)]
               : nullptr;
  }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  std::string unk_, prefix_;
  int64_t max_chars_;
  int32_t unk_id_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const nlohmann::json& j, const Where& w) {
  return std::make_unique<WordPiece>(j, w);
}

}  // namespace dscpp::tok
