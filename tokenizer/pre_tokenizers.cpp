// Pre-tokenizers: ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation
// and Sequence, with the `tokenizers` library's split behaviours.
#include "core/error.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/text.h"

#include <unicode/uchar.h>

#include <functional>

namespace dscpp::tok {

namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;
enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior behavior_of(const nlohmann::json& j, const Where& w) {
  const std::string b = j.value("behavior", std::string("Isolated"));
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  refuse(w / "behavior", "unknown split behavior \"" + b + "\" (expected Removed, Isolated, MergedWithPrevious, "
                         "MergedWithNext or Contiguous)");
}

// NormalizedString::split: the word cut at the matches, the pieces kept or merged by `b`,
// empty pieces dropped.
void split_at(std::string_view word, const Ranges& matches, Behavior b, bool invert, std::vector<std::string>& out) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;  // (range, is delimiter)
  size_t at = 0;
  for (auto [s, e] : matches) {
    if (s > at) parts.push_back({{at, s}, invert});
    parts.push_back({{s, e}, !invert});
    at = e;
  }
  if (at < word.size()) parts.push_back({{at, word.size()}, invert});
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_delimiter = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto [r, delim] = parts[i];
    switch (b) {
      case Behavior::removed:
        if (!delim) kept.push_back(r);
        break;
      case Behavior::isolated:
        kept.push_back(r);
        break;
      case Behavior::contiguous:
        if (delim && previous_delimiter && !kept.empty()) kept.back().second = r.second;
        else kept.push_back(r);
        break;
      case Behavior::merged_with_previous:
        if (delim && !kept.empty() && !previous_delimiter) kept.back().second = r.second;
        else kept.push_back(r);
        break;
      case Behavior::merged_with_next:
        if (!delim && previous_delimiter && !kept.empty()) kept.back().second = r.second;
        else kept.push_back(r);
        break;
    }
    previous_delimiter = delim;
  }
  for (auto [s, e] : kept)
    if (e > s) out.emplace_back(word.substr(s, e - s));
}

// Ranges of the characters for which `pred` holds, one range per character.
Ranges char_matches(std::string_view word, const std::function<bool(char32_t)>& pred) {
  Ranges r;
  for (size_t i = 0, n = 0; i < word.size(); i += n)
    if (pred(next_code_point(word, i, &n))) r.emplace_back(i, i + n);
  return r;
}

class Split final : public PreTokenizer {
 public:
  Split(const nlohmann::json& j, const Where& w)
      : behavior_(behavior_of(j, w)),
        invert_(bool_at(j, "invert", false)),
        regex_(pattern_regex(j.value("pattern", nlohmann::json()), w.file + ": " + (w / "pattern").path)) {}
  void split(std::string_view word, bool at_start, std::vector<std::string>& out) const override {
    split_at(word, regex_->find_all(word), behavior_, invert_, out);
  }

 private:
  Behavior behavior_;
  bool invert_;
  std::unique_ptr<Regex> regex_;
};

// GPT-2's word pattern, then every byte of each word written in the byte-level alphabet.
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(const nlohmann::json& j, const Where& w)
      : add_prefix_space_(bool_at(j, "add_prefix_space", true)), use_regex_(bool_at(j, "use_regex", true)) {
    if (use_regex_)
      regex_ = std::make_unique<Regex>(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                                       w.file + ": " + w.path);
  }
  void split(std::string_view word, bool at_start, std::vector<std::string>& out) const override {
    std::string prefixed;
    if (add_prefix_space_ && !word.empty() && word[0] != ' ') {
      prefixed = " " + std::string(word);
      word = prefixed;
    }
    std::vector<std::string> words;
    if (use_regex_)
      split_at(word, regex_->find_all(word), Behavior::isolated, false, words);
    else if (!word.empty())
      words.emplace_back(word);
    const auto& map = byte_to_char();
    for (const std::string& piece : words) {
      std::string mapped;
      for (unsigned char b : piece) append_utf8(mapped, map[b]);
      out.push_back(std::move(mapped));
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const nlohmann::json& j, const Where& w)
      : replacement_(j.value("replacement", std::string("\u2581"))), split_(bool_at(j, "split", true)) {
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = bool_at(j, "add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      refuse(w / "prepend_scheme", "expected always, first or never, found \"" + scheme + "\"");
    prepend_ = scheme == "always";
    first_ = scheme == "first";
  }
  void split(std::string_view word, bool at_start, std::vector<std::string>& out) const override {
    std::string s;
    for (char c : word) c == ' ' ? s += replacement_ : s += c;
    if ((prepend_ || (first_ && at_start)) && !s.empty() && s.compare(0, replacement_.size(), replacement_) != 0)
      s = replacement_ + s;
    if (!split_) {
      if (!s.empty()) out.push_back(std::move(s));
      return;
    }
    Ranges m;
    for (size_t at = s.find(replacement_); at != std::string::npos; at = s.find(replacement_, at + replacement_.size()))
      m.emplace_back(at, at + replacement_.size());
    split_at(s, m, Behavior::merged_with_next, false, out);
  }

 private:
  std::string replacement_;
  bool split_, prepend_ = true, first_ = false;
};

bool is_word_char(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) ||
         u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER ||
         (U_GET_GC_MASK(static_cast<UChar32>(c)) & (U_GC_M_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_JOIN_CONTROL);
}

bool is_punctuation(char32_t c) {
  return (c < 0x80 && std::ispunct(static_cast<int>(c))) || (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

class Predicate final : public PreTokenizer {
 public:
  Predicate(std::function<void(std::string_view, std::vector<std::string>&)> f) : f_(std::move(f)) {}
  void split(std::string_view word, bool, std::vector<std::string>& out) const override { f_(word, out); }

 private:
  std::function<void(std::string_view, std::vector<std::string>&)> f_;
};

class Sequence final : public PreTokenizer {
 public:
  Sequence(const nlohmann::json& j, const Where& w) {
    const auto& list = j.at("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) steps_.push_back(make_pre_tokenizer(list[i], (w / "pretokenizers")[i]));
  }
  void split(std::string_view word, bool at_start, std::vector<std::string>& out) const override {
    std::vector<std::string> words{std::string(word)};
    for (const auto& step : steps_) {
      std::vector<std::string> next;
      for (size_t i = 0; i < words.size(); ++i) step->split(words[i], at_start && i == 0, next);
      words = std::move(next);
    }
    for (auto& x : words) out.push_back(std::move(x));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = string_at(j, w, "type");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j, w);
  if (type == "Split") return std::make_unique<Split>(j, w);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j, w);
  if (type == "Sequence") return std::make_unique<Sequence>(j, w);
  if (type == "Whitespace")
    return std::make_unique<Predicate>([](std::string_view word, std::vector<std::string>& out) {
      // \w+|[^\w\s]+: runs of word characters, runs of other non-space characters.
      Ranges m;
      for (size_t i = 0, n = 0; i < word.size();) {
        const char32_t c = next_code_point(word, i, &n);
        if (is_whitespace(c)) {
          i += n;
          continue;
        }
        const bool w0 = is_word_char(c);
        size_t e = i + n;
        for (size_t k = 0; e < word.size(); e += k) {
          const char32_t d = next_code_point(word, e, &k);
          if (is_whitespace(d) || is_word_char(d) != w0) break;
        }
        m.emplace_back(i, e);
        i = e;
      }
      split_at(word, m, Behavior::removed, true, out);
    });
  if (type == "BertPreTokenizer")  // whitespace removed, then each punctuation character alone
    return std::make_unique<Predicate>([](std::string_view word, std::vector<std::string>& out) {
      std::vector<std::string> words;
      split_at(word, char_matches(word, is_whitespace), Behavior::removed, false, words);
      for (const std::string& x : words) split_at(x, char_matches(x, is_punctuation), Behavior::isolated, false, out);
    });
  if (type == "WhitespaceSplit")
    return std::make_unique<Predicate>([](std::string_view word, std::vector<std::string>& out) {
      split_at(word, char_matches(word, is_whitespace), Behavior::removed, false, out);
    });
  if (type == "Digits") {
    const Behavior b = bool_at(j, "individual_digits", false) ? Behavior::isolated : Behavior::contiguous;
    return std::make_unique<Predicate>([b](std::string_view word, std::vector<std::string>& out) {
      split_at(word,
               char_matches(word,
                            [](char32_t c) {
                              return u_isdigit(static_cast<UChar32>(c)) != 0 ||
                                     u_charType(static_cast<UChar32>(c)) == U_OTHER_NUMBER ||
                                     u_charType(static_cast<UChar32>(c)) == U_LETTER_NUMBER;
                            }),
               b, false, out);
    });
  }
  if (type == "Punctuation") {
    const Behavior b = behavior_of(j, w);
    return std::make_unique<Predicate>([b](std::string_view word, std::vector<std::string>& out) {
      split_at(word, char_matches(word, is_punctuation), b, false, out);
    });
  }
  refuse(w / "type", "unknown pre-tokenizer \"" + type + "\"");
}

}  // namespace dscpp::tok
