// Text as Python's str methods see it, for the metrics whose reference implementation (sacreBLEU)
// is Python: its whitespace, its lowercasing, its code points. Text is UTF-8.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dscpp::metrics {

// str.isspace() for one code point: the characters str.split() and str.rstrip() cut at. Wider
// than ASCII's (U+0085, U+00A0, U+2000..U+200A, U+3000, the file separators U+001C..U+001F).
bool is_py_space(char32_t c);

// The code point at s[i] and its length in bytes. A byte that starts no well-formed sequence is
// returned as itself with length 1, so that every byte of any input lands in some character.
char32_t code_point_at(std::string_view s, size_t i, size_t* len);

// The offset of the first invalid byte, or npos when `s` is well-formed UTF-8 (no surrogates,
// no overlong forms), which is what Python's strict decoder accepts.
size_t invalid_utf8_at(std::string_view s);

// str.split() without arguments: the runs between whitespace, none empty.
std::vector<std::string_view> split_py(std::string_view s);
// str.rstrip() without arguments.
std::string_view rstrip_py(std::string_view s);
// The number of code points (Python's len()).
size_t code_point_count(std::string_view s);

// str.lower(): Unicode's full lowercase mappings (one character may become two, U+0130 becomes
// "i̇") with the final-sigma rule, through ICU's root locale, which applies no language's rules.
// Bytes that are not UTF-8 pass through unchanged.
std::string lower_py(std::string_view s);

}  // namespace dscpp::metrics
