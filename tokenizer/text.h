// UTF-8 and the byte-level alphabet, as the tokenizers' components see text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dscpp::tok {

// The code point starting at s[i] and its length in bytes; an invalid sequence is one byte
// decoded as U+FFFD (the caller's text is validated first: `valid_utf8`).
char32_t next_code_point(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t c);
bool valid_utf8(std::string_view s);
// Invalid sequences replaced by U+FFFD, as Python's bytes.decode(errors="replace") does.
std::string replace_invalid_utf8(std::string_view s);

// GPT-2's reversible map from the 256 byte values to printable code points: bytes that are
// printable Latin-1 map to themselves, the others to U+0100 onwards in byte order.
const std::array<char32_t, 256>& byte_to_char();
// The inverse; -1 for a code point that is not in the alphabet.
int char_to_byte(char32_t c);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t c);

}  // namespace dscpp::tok
