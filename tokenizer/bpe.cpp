// The BPE model: a word's characters (with the continuing-subword prefix and end-of-word
// suffix where set) become ids, unknown ones through byte fallback (<0xNN> tokens) or the unk
// token, then the pair with the lowest merge rank is merged, leftmost first, until none is
// left — the order of the `tokenizers` library's merge queue.
#include "core/error.h"
#include "tokenizer/components.h"
#include "tokenizer/text.h"

#include <fmt/format.h>

#include <queue>

namespace dscpp::tok {

namespace {

struct PairHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
};
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class Bpe final : public Model {
 public:
  Bpe(const nlohmann::json& j, const Where& w) {
    if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() > 0)
      refuse(w / "dropout", "BPE dropout makes encoding random; dscpp encodes deterministically");
    for (const auto& [token, id] : j.at("vocab").items()) {
      vocab_[token] = id.get<int32_t>();
      if (id.get<int32_t>() < 0) refuse(w / "vocab", "negative id for token \"" + token + "\"");
    }
    tokens_.resize(vocab_.size());
    for (const auto& [token, id] : vocab_) {
      if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(static_cast<size_t>(id) + 1);
      tokens_[static_cast<size_t>(id)] = token;
      present_.resize(tokens_.size());
      present_[static_cast<size_t>(id)] = true;
    }
    if (j.contains("unk_token") && !j["unk_token"].is_null()) unk_ = j["unk_token"].get<std::string>();
    if (j.contains("continuing_subword_prefix") && !j["continuing_subword_prefix"].is_null())
      prefix_ = j["continuing_subword_prefix"].get<std::string>();
    if (j.contains("end_of_word_suffix") && !j["end_of_word_suffix"].is_null())
      suffix_ = j["end_of_word_suffix"].get<std::string>();
    fuse_unk_ = bool_at(j, "fuse_unk", false);
    byte_fallback_ = bool_at(j, "byte_fallback", false);
    ignore_merges_ = bool_at(j, "ignore_merges", false);
    const auto& merges = j.at("merges");
    for (size_t i = 0; i < merges.size(); ++i) {
      std::string a, b;
      if (merges[i].is_string()) {  // "a b" (tokenizers < 0.20)
        const std::string m = merges[i].get<std::string>();
        const size_t sp = m.find(' ');
        if (sp == std::string::npos)
          refuse((w / "merges")[i], "expected two tokens separated by a space, found \"" + m + "\"");
        a = m.substr(0, sp);
        b = m.substr(sp + 1);
      } else if (merges[i].is_array() && merges[i].size() == 2) {  // ["a", "b"]
        a = merges[i][0].get<std::string>();
        b = merges[i][1].get<std::string>();
      } else {
        refuse((w / "merges")[i], "expected \"a b\" or [\"a\", \"b\"]");
      }
      const int32_t ia = id_of(a, (w / "merges")[i]), ib = id_of(b, (w / "merges")[i]);
      const std::string merged = a + (b.compare(0, prefix_.size(), prefix_) == 0 ? b.substr(prefix_.size()) : b);
      merges_.emplace(pair_key(ia, ib),
                      std::pair<int32_t, int32_t>{static_cast<int32_t>(i), id_of(merged, (w / "merges")[i])});
    }
  }

  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override {
    if (ignore_merges_)
      if (auto it = vocab_.find(std::string(word)); it != vocab_.end()) return ids.push_back(it->second);
    std::vector<int32_t> symbols;
    int32_t pending_unk = -1;
    for (size_t i = 0, n = 0; i < word.size(); i += n) {
      next_code_point(word, i, &n);
      std::string s(word.substr(i, n));
      if (i > 0) s = prefix_ + s;
      if (i + n == word.size()) s += suffix_;
      if (auto it = vocab_.find(s); it != vocab_.end()) {
        if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
        symbols.push_back(it->second);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (unsigned char c : s)
          if (auto it = vocab_.find(fmt::format("<0x{:02X}>", c)); it != vocab_.end()) bytes.push_back(it->second);
        if (bytes.size() == s.size()) {
          symbols.insert(symbols.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      if (!unk_.empty()) {
        const auto it = vocab_.find(unk_);
        if (it == vocab_.end()) fail("BPE: the unk token \"{}\" is not in the vocabulary", unk_);
        if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
        pending_unk = it->second;
      }
    }
    if (pending_unk >= 0) symbols.push_back(pending_unk);
    merge_all(symbols);
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }

  const std::unordered_map<std::string, int32_t>& vocab() const override { return vocab_; }
  const std::string* token(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < tokens_.size() && present_[static_cast<size_t>(id)]
               ? &tokens_[static_cast<size_t>(id)]
               : nullptr;
  }

 private:
  int32_t id_of(const std::string& token, const Where& w) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) refuse(w, "merge names \"" + token + "\", which is not in the vocabulary");
    return it->second;
  }

  // The merge queue: lowest rank first, then leftmost; an entry whose pair changed is stale.
  void merge_all(std::vector<int32_t>& sym) const {
    const int n = static_cast<int>(sym.size());
    if (n < 2) return;
    std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
    std::vector<char> alive(static_cast<size_t>(n), 1);
    for (int i = 0; i < n; ++i)
      prev[static_cast<size_t>(i)] = i - 1, next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    struct Entry {
      int32_t rank;
      int pos;
      int32_t new_id;
      bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    auto push = [&](int pos) {
      const int nx = next[static_cast<size_t>(pos)];
      if (nx < 0) return;
      if (auto it = merges_.find(pair_key(sym[static_cast<size_t>(pos)], sym[static_cast<size_t>(nx)]));
          it != merges_.end())
        queue.push({it->second.first, pos, it->second.second});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      const Entry top = queue.top();
      queue.pop();
      const auto p = static_cast<size_t>(top.pos);
      if (!alive[p] || next[p] < 0) continue;
      const auto nx = static_cast<size_t>(next[p]);
      const auto it = merges_.find(pair_key(sym[p], sym[nx]));
      if (it == merges_.end() || it->second.second != top.new_id) continue;
      sym[p] = top.new_id;
      alive[nx] = 0;
      next[p] = next[nx];
      if (next[p] >= 0) prev[static_cast<size_t>(next[p])] = top.pos;
      if (prev[p] >= 0) push(prev[p]);
      push(top.pos);
    }
    std::vector<int32_t> out;
    for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)]) out.push_back(sym[static_cast<size_t>(i)]);
    sym = std::move(out);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>, PairHash> merges_;  // (a, b) → (rank, merged id)
  std::string unk_, prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

}  // namespace

std::unique_ptr<Model> make_model(const nlohmann::json& j, const Where& w) {
  const std::string type = j.value("type", std::string("BPE"));  // older files omit the BPE model's type
  if (type == "BPE") return std::make_unique<Bpe>(j, w);
  if (type == "Unigram") return make_unigram(j, w);
  if (type == "WordPiece") return make_wordpiece(j, w);
  refuse(w / "type", "the " + type + " model is not supported yet (supported: BPE, Unigram, WordPiece)");
}

}  // namespace dscpp::tok
