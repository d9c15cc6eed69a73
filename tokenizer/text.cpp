#include "tokenizer/text.h"

#include <unicode/uchar.h>

#include <unordered_map>

namespace dscpp::tok {

char32_t next_code_point(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto at = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b < 0x80) return *len = 1, b;
  if ((b & 0xE0) == 0xC0 && b >= 0xC2 && cont(1)) return *len = 2, (static_cast<char32_t>(b & 0x1F) << 6) | at(1);
  if ((b & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    const char32_t c = (static_cast<char32_t>(b & 0x0F) << 12) | (at(1) << 6) | at(2);
    if (c >= 0x800 && (c < 0xD800 || c > 0xDFFF)) return *len = 3, c;
  }
  if ((b & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    const char32_t c = (static_cast<char32_t>(b & 0x07) << 18) | (at(1) << 12) | (at(2) << 6) | at(3);
    if (c >= 0x10000 && c <= 0x10FFFF) return *len = 4, c;
  }
  return *len = 1, 0xFFFD;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0, n = 0; i < s.size(); i += n)
    if (next_code_point(s, i, &n) == 0xFFFD && !(n == 3 && s.substr(i, 3) == "\xEF\xBF\xBD")) return false;
  return true;
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, n = 0; i < s.size(); i += n) append_utf8(out, next_code_point(s, i, &n));
  return out;
}

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    for (int b = 0; b < 256; ++b) m[byte_to_char()[static_cast<size_t>(b)]] = b;
    return m;
  }();
  const auto it = inverse.find(c);
  return it == inverse.end() ? -1 : it->second;
}

bool is_whitespace(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

}  // namespace dscpp::tok
