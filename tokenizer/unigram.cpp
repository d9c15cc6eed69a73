// The Unigram model (SentencePiece's, as T5/mT5/ALBERT conversions carry it): the best-scoring
// segmentation of a word into vocabulary pieces by Viterbi over its byte positions, a character
// no piece covers scored as unknown (the lowest score minus 10), consecutive unknowns fused
// into one — the `tokenizers` library's encode_optimized.
#include "core/error.h"
#include "tokenizer/components.h"
#include "tokenizer/text.h"

#include <fmt/format.h>

#include <limits>
#include <map>

namespace dscpp::tok {

namespace {

// A byte trie over the pieces, for the prefixes of a position that are pieces.
class PieceTrie {
 public:
  void insert(std::string_view key, int32_t id) {
    int node = 0;
    for (unsigned char c : key) {
      auto [it, added] = nodes_[static_cast<size_t>(node)].next.emplace(c, static_cast<int>(nodes_.size()));
      if (added) nodes_.emplace_back();
      node = it->second;
    }
    nodes_[static_cast<size_t>(node)].id = id;
  }
  template <typename F>
  void prefixes(std::string_view s, size_t from, F&& f) const {
    int node = 0;
    for (size_t i = from; i < s.size(); ++i) {
      const auto& next = nodes_[static_cast<size_t>(node)].next;
      const auto it = next.find(static_cast<unsigned char>(s[i]));
      if (it == next.end()) return;
      node = it->second;
      if (nodes_[static_cast<size_t>(node)].id >= 0) f(i + 1 - from, nodes_[static_cast<size_t>(node)].id);
    }
  }

 private:
  struct Node {
    std::map<unsigned char, int> next;
    int32_t id = -1;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

class Unigram final : public Model {
 public:
  Unigram(const nlohmann::json& j, const Where& w) {
    const auto& vocab = j.at("vocab");
    if (!vocab.is_array() || vocab.empty()) refuse(w / "vocab", "expected a non-empty list of [piece, score]");
    for (size_t i = 0; i < vocab.size(); ++i) {
      if (!vocab[i].is_array() || vocab[i].size() != 2 || !vocab[i][0].is_string() || !vocab[i][1].is_number())
        refuse((w / "vocab")[i], "expected [piece, score]");
      const std::string piece = vocab[i][0].get<std::string>();
      const double score = vocab[i][1].get<double>();
      pieces_.push_back(piece);
      scores_.push_back(score);
      ids_[piece] = static_cast<int32_t>(i);  // a repeated piece: the last one, as the tokenizers library keeps
      trie_.insert(piece, static_cast<int32_t>(i));
      min_score_ = std::min(min_score_, score);
    }
    if (j.contains("unk_id") && !j["unk_id"].is_null()) {
      unk_id_ = j["unk_id"].get<int32_t>();
      if (unk_id_ < 0 || static_cast<size_t>(unk_id_) >= pieces_.size()) refuse(w / "unk_id", "outside the vocabulary");
    }
    byte_fallback_ = bool_at(j, "byte_fallback", false);
  }

  void tokenize(std::string_view s, std::vector<int32_t>& ids) const override {
    if (s.empty()) return;
    struct Node {
      int32_t id = 0;
      double score = 0;
      int64_t start = -1;
    };
    std::vector<Node> best(s.size() + 1);
    const double unk_score = min_score_ - 10.0;
    for (size_t at = 0; at < s.size();) {
      size_t char_len = 0;
      next_code_point(s, at, &char_len);
      const double here = best[at].score;
      bool single = false;
      trie_.prefixes(s, at, [&](size_t len, int32_t id) {
        Node& t = best[at + len];
        const double score = here + scores_[static_cast<size_t>(id)];
        if (t.start < 0 || score > t.score) t = {id, score, static_cast<int64_t>(at)};
        single = single || len == char_len;
      });
      if (!single) {
        if (unk_id_ < 0) fail("Unigram: \"{}\" has no piece and the model has no unk_id", s.substr(at, char_len));
        Node& t = best[at + char_len];
        const double score = here + unk_score;
        if (t.start < 0 || score > t.score) t = {unk_id_, score, static_cast<int64_t>(at)};
      }
      at += char_len;
    }
    // Back from the end; consecutive unknown pieces become one string (fused).
    std::vector<std::string> words;
    std::string fused;
    for (size_t end = s.size(); end > 0;) {
      const Node& n = best[end];
      const auto start = static_cast<size_t>(n.start);
      if (n.id == unk_id_) {
        fused.insert(0, s.substr(start, end - start));
      } else {
        if (!fused.empty()) words.push_back(std::move(fused)), fused.clear();
        words.emplace_back(s.substr(start, end - start));
      }
      end = start;
    }
    if (!fused.empty()) words.push_back(std::move(fused));
    for (auto it = words.rbegin(); it != words.rend(); ++it) {
      if (const auto found = ids_.find(*it); found != ids_.end()) {
        ids.push_back(found->second);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (unsigned char c : *it)
          if (const auto b = ids_.find(fmt::format("<0x{:02X}>", c)); b != ids_.end()) bytes.push_back(b->second);
        if (bytes.size() == it->size()) {
          ids.insert(ids.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      ids.push_back(unk_id_);
    }
  }

  const std::unordered_map<std::string, int32_t>& vocab() const override { return ids_; }
  const std::string* token(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < pieces_.size() ? &pieces_[static_cast<size_t>(id)] : nullptr;
  }

 private:
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string, int32_t> ids_;
  PieceTrie trie_;
  double min_score_ = std::numeric_limits<double>::infinity();
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> make_unigram(const nlohmann::json& j, const Where& w) { return std::make_unique<Unigram>(j, w); }

}  // namespace dscpp::tok
