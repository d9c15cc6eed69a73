// SentencePiece's Precompiled normalizer (T5, mT5, ALBERT, XLM-R conversions): the model's
// character map, a darts-clone double-array trie of UTF-8 keys whose values point into a
// table of NUL-terminated replacements. As the `tokenizers` library applies it: each extended
// grapheme cluster shorter than 6 bytes is looked up whole, and replaced by the value of the
// shortest key that is a prefix of it; otherwise (or when none is) each character is looked
// up alone.
#include "core/error.h"
#include "tokenizer/components.h"

#include <unicode/brkiter.h>
#include <unicode/unistr.h>

#include <cstring>

namespace dscpp::tok {

namespace {

std::string base64_decode(std::string_view in, const Where& w) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) refuse(w, "precompiled_charsmap is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

class Precompiled final : public Normalizer {
 public:
  Precompiled(const nlohmann::json& j, const Where& w) {
    const std::string blob = base64_decode(string_at(j, w, "precompiled_charsmap"), w / "precompiled_charsmap");
    uint32_t trie_bytes = 0;
    if (blob.size() < 4) refuse(w / "precompiled_charsmap", "shorter than its header");
    std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian, as the host (x86-64, aarch64)
    if (trie_bytes % 4 != 0 || 4 + static_cast<size_t>(trie_bytes) > blob.size() || trie_bytes == 0)
      refuse(w / "precompiled_charsmap", "the trie size in its header does not fit the data");
    units_.resize(trie_bytes / 4);
    std::memcpy(units_.data(), blob.data() + 4, trie_bytes);
    normalized_ = blob.substr(4 + trie_bytes);
  }

  std::string normalize(std::string_view text) const override {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::BreakIterator> graphemes(
        icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
    if (U_FAILURE(status)) fail("ICU: no grapheme break iterator ({})", u_errorName(status));
    const icu::UnicodeString u =
        icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    graphemes->setText(u);
    std::string out;
    for (int32_t b = graphemes->first(), e = graphemes->next(); e != icu::BreakIterator::DONE;
         b = e, e = graphemes->next()) {
      std::string g;
      u.tempSubStringBetween(b, e).toUTF8String(g);
      if (g.size() < 6)
        if (const char* r = transform(g)) {
          out += r;
          continue;
        }
      for (size_t i = 0; i < g.size();) {
        size_t n = 1;
        while (i + n < g.size() && (static_cast<unsigned char>(g[i + n]) & 0xC0) == 0x80) ++n;
        const std::string c = g.substr(i, n);
        const char* r = transform(c);
        out += r ? std::string(r) : c;
        i += n;
      }
    }
    return out;
  }

 private:
  // The replacement of the shortest key that is a prefix of `chunk` (darts-clone's
  // common-prefix search, first result), or null.
  const char* transform(std::string_view chunk) const {
    auto offset = [](uint32_t u) { return static_cast<size_t>((u >> 10) << ((u & (1u << 9)) >> 6)); };
    size_t node = offset(units_[0]);
    for (unsigned char c : chunk) {
      if (c == 0) break;
      node ^= c;
      if (node >= units_.size()) return nullptr;
      const uint32_t unit = units_[node];
      if ((unit & ((1u << 31) | 0xFF)) != c) return nullptr;
      node ^= offset(unit);
      if (node >= units_.size()) return nullptr;
      if ((unit >> 8) & 1) {
        const size_t at = units_[node] & ((1u << 31) - 1);
        return at < normalized_.size() ? normalized_.c_str() + at : nullptr;
      }
    }
    return nullptr;
  }

  std::vector<uint32_t> units_;
  std::string normalized_;
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const nlohmann::json& j, const Where& w) {
  return std::make_unique<Precompiled>(j, w);
}

}  // namespace dscpp::tok
