// Decoders, each a pass over the list of token strings as the `tokenizers` library (0.19)
// chains them: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece, BPEDecoder
// and Sequence.
#include "core/error.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/text.h"

namespace dscpp::tok {

namespace {

std::vector<char32_t> chars_of(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0, n = 0; i < s.size(); i += n) out.push_back(next_code_point(s, i, &n));
  return out;
}

// Byte-level tokens back to bytes (a token with a character outside the alphabet keeps its own
// bytes), then the bytes as UTF-8 with invalid sequences replaced: one string.
class ByteLevel final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (char32_t c : chars_of(t)) {
        const int b = char_to_byte(c);
        if (b < 0) {
          all = false;
          break;
        }
        mapped += static_cast<char>(b);
      }
      bytes += all ? mapped : t;
    }
    tokens = {replace_invalid_utf8(bytes)};
  }
};

class Metaspace final : public Decoder {
 public:
  explicit Metaspace(const nlohmann::json& j) {
    const std::string r = j.value("replacement", std::string("\u2581"));
    replacement_ = chars_of(r).empty() ? U'\u2581' : chars_of(r)[0];
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = bool_at(j, "add_prefix_space", true) ? "always" : "never";
    strip_first_ = scheme != "never";
  }
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      for (char32_t c : chars_of(tokens[i])) {
        if (c != replacement_) append_utf8(out, c);
        else if (!(i == 0 && strip_first_)) out += ' ';
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

class ByteFallback final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (valid_utf8(pending)) out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\uFFFD");
      pending.clear();
    };
    for (std::string& t : tokens) {
      auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4])) {
        pending += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens = {all};
  }
};

class Strip final : public Decoder {
 public:
  Strip(const nlohmann::json& j, const Where& w)
      : start_(j.value("start", 0)), stop_(j.value("stop", 0)) {
    const auto c = chars_of(string_at(j, w, "content"));
    if (c.size() != 1) refuse(w / "content", "expected one character");
    content_ = c[0];
  }
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      const auto c = chars_of(t);
      size_t b = 0, e = c.size();
      for (size_t i = 0; i < static_cast<size_t>(start_) && i < c.size() && c[i] == content_; ++i) b = i + 1;
      for (size_t i = 0; i < static_cast<size_t>(stop_) && i < c.size() && c[c.size() - i - 1] == content_; ++i)
        e = c.size() - i - 1;
      std::string out;
      for (size_t i = b; i < e; ++i) append_utf8(out, c[i]);
      t = std::move(out);
    }
  }

 private:
  int start_, stop_;
  char32_t content_ = 0;
};

class Replace final : public Decoder {
 public:
  Replace(const nlohmann::json& j, const Where& w)
      : content_(string_at(j, w, "content")),
        regex_(pattern_regex(j.value("pattern", nlohmann::json()), w.file + ": " + (w / "pattern").path)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_all(*regex_, t, content_);
  }

 private:
  std::string content_;
  std::unique_ptr<Regex> regex_;
};

// WordPiece: "##" continuations joined to the previous word, others after a space; optional cleanup.
class WordPiece final : public Decoder {
 public:
  explicit WordPiece(const nlohmann::json& j)
      : prefix_(j.value("prefix", std::string("##"))), cleanup_(bool_at(j, "cleanup", true)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t = t.substr(prefix_.size());
        else t = " " + t;
      }
      if (cleanup_) t = cleanup(t);
    }
  }
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> rules[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (auto [from, to] : rules)
      for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + std::string_view(to).size()))
        s.replace(at, std::string_view(from).size(), to);
    return s;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder final : public Decoder {
 public:
  explicit BpeDecoder(const nlohmann::json& j) : suffix_(j.value("suffix", std::string("</w>"))) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      const size_t at = t.find(suffix_);
      if (at != std::string::npos) t.replace(at, suffix_.size(), i + 1 == tokens.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class Sequence final : public Decoder {
 public:
  Sequence(const nlohmann::json& j, const Where& w) {
    const auto& list = j.at("decoders");
    for (size_t i = 0; i < list.size(); ++i) steps_.push_back(make_decoder(list[i], (w / "decoders")[i]));
  }
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = string_at(j, w, "type");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(j);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(j, w);
  if (type == "Replace") return std::make_unique<Replace>(j, w);
  if (type == "WordPiece") return std::make_unique<WordPiece>(j);
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(j);
  if (type == "Sequence") return std::make_unique<Sequence>(j, w);
  refuse(w / "type", "unknown decoder \"" + type + "\"");
}

}  // namespace dscpp::tok
