// Normalizers: the Unicode normal forms (ICU's), Lowercase, Strip, Replace, Prepend and
// Sequence; SentencePiece's Precompiled character map is in precompiled.cpp.
#include "core/error.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/text.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

namespace dscpp::tok {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  UnicodeForm(const std::string& form, const Where& w) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC") n_ = icu::Normalizer2::getNFCInstance(status);
    if (form == "NFD") n_ = icu::Normalizer2::getNFDInstance(status);
    if (form == "NFKC") n_ = icu::Normalizer2::getNFKCInstance(status);
    if (form == "NFKD") n_ = icu::Normalizer2::getNFKDInstance(status);
    if (!n_ || U_FAILURE(status)) refuse(w, "ICU has no " + form + " normalizer (" + u_errorName(status) + ")");
  }
  std::string normalize(std::string_view text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString out =
        n_->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))),
                      status);
    if (U_FAILURE(status)) fail("Unicode normalization failed ({})", u_errorName(status));
    std::string s;
    return out.toUTF8String(s);
  }

 private:
  const icu::Normalizer2* n_ = nullptr;
};

// Rust's char::to_lowercase, one code point at a time: the full mapping without context.
class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    for (size_t i = 0, n = 0; i < text.size(); i += n) {
      const char32_t c = next_code_point(text, i, &n);
      UChar in[2], lower[8];
      int32_t len = 0;
      U16_APPEND_UNSAFE(in, len, static_cast<UChar32>(c));
      UErrorCode status = U_ZERO_ERROR;
      const int32_t m = u_strToLower(lower, 8, in, len, "", &status);
      for (int32_t k = 0; k < m;) {
        UChar32 d;
        U16_NEXT(lower, k, m, d);
        append_utf8(out, static_cast<char32_t>(d));
      }
    }
    return out;
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    size_t b = 0, e = text.size(), n = 0;
    while (left_ && b < e && is_whitespace(next_code_point(text, b, &n))) b += n;
    while (right_ && e > b) {
      size_t s = e - 1;
      while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
      if (!is_whitespace(next_code_point(text, s, &n))) break;
      e = s;
    }
    return std::string(text.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

class Replace final : public Normalizer {
 public:
  Replace(const nlohmann::json& j, const Where& w)
      : content_(string_at(j, w, "content")),
        regex_(pattern_regex(j.value("pattern", nlohmann::json()), w.file + ": " + (w / "pattern").path)) {}
  std::string normalize(std::string_view text) const override { return replace_all(*regex_, text, content_); }

 private:
  std::string content_;
  std::unique_ptr<Regex> regex_;
};

// BERT's: control characters dropped and whitespace made spaces, CJK ideographs padded with
// spaces, accents stripped (NFD without nonspacing marks; by default when lowercasing), lowercase.
class Bert final : public Normalizer {
 public:
  explicit Bert(const nlohmann::json& j)
      : clean_(bool_at(j, "clean_text", true)),
        chinese_(bool_at(j, "handle_chinese_chars", true)),
        lowercase_(bool_at(j, "lowercase", true)),
        strip_(j.contains("strip_accents") && j["strip_accents"].is_boolean() ? j["strip_accents"].get<bool>()
                                                                                : lowercase_),
        nfd_("NFD", Where{}) {}
  std::string normalize(std::string_view text) const override {
    std::string s;
    for (size_t i = 0, n = 0; i < text.size(); i += n) {
      const char32_t c = next_code_point(text, i, &n);
      const auto u = static_cast<UChar32>(c);
      const bool tab_or_newline = c == '\t' || c == '\n' || c == '\r';
      if (clean_ && (c == 0 || c == 0xFFFD || (!tab_or_newline && (U_GET_GC_MASK(u) & U_GC_C_MASK) != 0))) continue;
      const bool cjk = (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
                       (c >= 0x2A700 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
                       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
      if (clean_ && (tab_or_newline || is_whitespace(c))) s += ' ';
      else if (chinese_ && cjk) (s += ' '), append_utf8(s, c), s += ' ';
      else append_utf8(s, c);
    }
    if (strip_) {
      const std::string d = nfd_.normalize(s);
      s.clear();
      for (size_t i = 0, n = 0; i < d.size(); i += n) {
        const char32_t c = next_code_point(d, i, &n);
        if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) append_utf8(s, c);
      }
    }
    return lowercase_ ? Lowercase().normalize(s) : s;
  }

 private:
  bool clean_, chinese_, lowercase_, strip_;
  UnicodeForm nfd_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  std::string normalize(std::string_view text) const override {
    return text.empty() ? std::string() : prepend_ + std::string(text);
  }

 private:
  std::string prepend_;
};

class Sequence final : public Normalizer {
 public:
  Sequence(const nlohmann::json& j, const Where& w) {
    const auto& list = j.at("normalizers");
    for (size_t i = 0; i < list.size(); ++i)
      if (auto n = make_normalizer(list[i], (w / "normalizers")[i])) steps_.push_back(std::move(n));
  }
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const Where& w) {
  if (j.is_null()) return nullptr;
  const std::string type = string_at(j, w, "type");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") return std::make_unique<UnicodeForm>(type, w);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") return std::make_unique<Strip>(bool_at(j, "strip_left", true), bool_at(j, "strip_right", true));
  if (type == "Replace") return std::make_unique<Replace>(j, w);
  if (type == "Prepend") return std::make_unique<Prepend>(string_at(j, w, "prepend"));
  if (type == "BertNormalizer") return std::make_unique<Bert>(j);
  if (type == "Sequence") return std::make_unique<Sequence>(j, w);
  if (type == "Precompiled") return make_precompiled(j, w);
  refuse(w / "type", "unknown normalizer \"" + type + "\"");
}

}  // namespace dscpp::tok
