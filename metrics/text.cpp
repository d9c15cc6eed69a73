#include "metrics/text.h"

#include "core/error.h"

#include <unicode/ucasemap.h>

#include <memory>

namespace dscpp::metrics {

bool is_py_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t code_point_at(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto low6 = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  *len = 1;
  if (b < 0x80) return b;
  if (b >= 0xC2 && b <= 0xDF && cont(1)) {
    *len = 2;
    return (static_cast<char32_t>(b & 0x1F) << 6) | low6(1);
  }
  if ((b & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    const char32_t c = (static_cast<char32_t>(b & 0x0F) << 12) | (low6(1) << 6) | low6(2);
    if (c >= 0x800 && (c < 0xD800 || c > 0xDFFF)) {
      *len = 3;
      return c;
    }
  }
  if (b >= 0xF0 && b <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const char32_t c = (static_cast<char32_t>(b & 0x07) << 18) | (low6(1) << 12) | (low6(2) << 6) | low6(3);
    if (c >= 0x10000 && c <= 0x10FFFF) {
      *len = 4;
      return c;
    }
  }
  return b;
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const char32_t c = code_point_at(s, i, &n);
    if (n == 1 && c >= 0x80) return i;
  }
  return std::string_view::npos;
}

std::vector<std::string_view> split_py(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = std::string_view::npos;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const bool space = is_py_space(code_point_at(s, i, &n));
    if (space && start != std::string_view::npos) {
      out.push_back(s.substr(start, i - start));
      start = std::string_view::npos;
    } else if (!space && start == std::string_view::npos) {
      start = i;
    }
  }
  if (start != std::string_view::npos) out.push_back(s.substr(start));
  return out;
}

std::string_view rstrip_py(std::string_view s) {
  size_t end = 0;  // just past the last character that is not whitespace
  for (size_t i = 0, n = 0; i < s.size(); i += n)
    if (!is_py_space(code_point_at(s, i, &n))) end = i + n;
  return s.substr(0, end);
}

size_t code_point_count(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0, n = 0; i < s.size(); i += n, ++count) code_point_at(s, i, &n);
  return count;
}

std::string lower_py(std::string_view s) {
  bool ascii = true;
  for (char ch : s) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) {
    std::string out(s);
    for (char& ch : out)
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    return out;
  }
  // The mapping is per thread: a UCaseMap is not safe to share while it maps.
  thread_local std::unique_ptr<UCaseMap, void (*)(UCaseMap*)> map = [] {
    UErrorCode status = U_ZERO_ERROR;
    UCaseMap* m = ucasemap_open("", 0, &status);
    if (U_FAILURE(status)) fail("lowercasing: ICU could not open its case mapping ({})", u_errorName(status));
    return std::unique_ptr<UCaseMap, void (*)(UCaseMap*)>(m, ucasemap_close);
  }();
  // Full lowercasing grows text by at most 3/2 (a 2-byte İ becomes 3 bytes); retry once if not.
  std::string out(s.size() * 3 / 2 + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n = ucasemap_utf8ToLower(map.get(), out.data(), static_cast<int32_t>(out.size()), s.data(),
                                           static_cast<int32_t>(s.size()), &status);
    if (status == U_BUFFER_OVERFLOW_ERROR) {
      out.resize(static_cast<size_t>(n));
      continue;
    }
    if (U_FAILURE(status)) fail("lowercasing: ICU failed ({})", u_errorName(status));
    out.resize(static_cast<size_t>(n));
    return out;
  }
  fail("lowercasing: ICU's output did not fit its own size");
}

}  // namespace dscpp::metrics
