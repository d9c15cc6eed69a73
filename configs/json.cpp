#include "configs/json.h"

#include <fmt/core.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

namespace dscpp::config {
namespace {

// Deeper nesting than any config needs; the limit keeps hostile input from overflowing the
// stack (the fuzz target relies on it).
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  JsonValue parse_document() {
    skip_space();
    if (at_end()) fail_here("the file is empty; expected a JSON object such as {\"train_batch_size\": 8}");
    JsonValue v = parse_value(0);
    skip_space();
    if (!at_end()) fail_here(fmt::format("unexpected {} after the end of the JSON value", show_char()));
    return v;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  Location here() const { return {line_, static_cast<int>(pos_ - line_start_) + 1}; }

  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }

  std::string show_char() const {
    if (at_end()) return "end of file";
    unsigned char c = static_cast<unsigned char>(peek());
    if (c < 0x20 || c >= 0x7f) return fmt::format("byte 0x{:02x}", c);
    return fmt::format("'{}'", static_cast<char>(c));
  }

  [[noreturn]] void fail_at(Location where, const std::string& message) const { throw JsonSyntaxError(where, message); }
  [[noreturn]] void fail_here(const std::string& message) const { fail_at(here(), message); }

  // Returns whether a line break was crossed: hjson lets a line break stand for a comma.
  bool skip_space() {
    int start_line = line_;
    for (;;) {
      while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) advance();
      if (at_end()) return line_ != start_line;
      if (peek() == '#' || (peek() == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/')) {
        while (!at_end() && peek() != '\n') advance();
      } else if (peek() == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*') {
        Location start = here();
        advance();
        advance();
        while (!at_end() && !(peek() == '*' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/')) advance();
        if (at_end()) fail_at(start, "this /* comment is never closed");
        advance();
        advance();
      } else {
        return line_ != start_line;
      }
    }
  }

  bool match_word(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    size_t end = pos_ + word.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
    for (size_t i = 0; i < word.size(); ++i) advance();
    return true;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) fail_here(fmt::format("nesting deeper than {} levels", kMaxDepth));
    JsonValue v;
    v.loc = here();
    char c = peek();
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"' || c == '\'') {
      v.kind = JsonValue::Kind::string;
      v.text = parse_string();
      return v;
    }
    // `inf` is how Python prints Accelerate's steps_per_print; accept it like Infinity.
    if (c == '-' || c == '+' || (c >= '0' && c <= '9') || c == '.' || c == 'I' || c == 'N' ||
        s_.substr(pos_, 3) == "inf") {
      return parse_number();
    }
    if (match_word("true")) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = true;
      return v;
    }
    if (match_word("false")) {
      v.kind = JsonValue::Kind::boolean;
      return v;
    }
    if (match_word("null")) return v;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      fail_here("expected a value; unquoted words are not accepted, write strings in double quotes");
    }
    fail_here(
        fmt::format("expected a value (object, array, string, number, true, false or null), found {}", show_char()));
  }

  JsonValue parse_number() {
    JsonValue v;
    v.loc = here();
    size_t start = pos_;
    bool negative = false;
    if (peek() == '-' || peek() == '+') {
      negative = peek() == '-';
      advance();
    }
    if (match_word("Infinity") || match_word("inf")) {
      v.kind = JsonValue::Kind::number;
      v.number = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      v.text = std::string(s_.substr(start, pos_ - start));
      return v;
    }
    if (match_word("NaN")) {
      v.kind = JsonValue::Kind::number;
      v.number = std::numeric_limits<double>::quiet_NaN();
      v.text = std::string(s_.substr(start, pos_ - start));
      return v;
    }
    bool integral = true;
    size_t digits = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) advance(), ++digits;
    if (peek() == '.') {
      integral = false;
      advance();
      while (std::isdigit(static_cast<unsigned char>(peek()))) advance(), ++digits;
    }
    if (digits == 0) fail_at(v.loc, "malformed number: expected digits");
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      advance();
      if (peek() == '-' || peek() == '+') advance();
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail_at(v.loc, "malformed number: exponent has no digits");
      while (std::isdigit(static_cast<unsigned char>(peek()))) advance();
    }
    if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_') {
      fail_here(fmt::format("malformed number: unexpected {}", show_char()));
    }
    v.text = std::string(s_.substr(start, pos_ - start));
    errno = 0;
    if (integral) {
      char* end = nullptr;
      long long n = std::strtoll(v.text.c_str(), &end, 10);
      if (errno != ERANGE) {
        v.kind = JsonValue::Kind::integer;
        v.integer = n;
        v.number = static_cast<double>(n);
        return v;
      }
      errno = 0;
    }
    v.kind = JsonValue::Kind::number;
    v.number = std::strtod(v.text.c_str(), nullptr);
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t parse_hex4() {
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = peek();
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) fail_here("\\u escape needs four hex digits");
      cp = cp * 16 + static_cast<uint32_t>(d);
      advance();
    }
    return cp;
  }

  // Double- or single-quoted (hjson accepts both); the closing quote matches the opening.
  std::string parse_string() {
    Location start = here();
    const char quote = peek();
    advance();
    std::string out;
    for (;;) {
      if (at_end()) fail_at(start, "this string is never closed (missing \")");
      char c = peek();
      if (c == quote) {
        advance();
        return out;
      }
      if (c == '\n') fail_at(start, "this string is never closed before the end of the line (missing \")");
      if (static_cast<unsigned char>(c) < 0x20) fail_here("control character inside a string; escape it");
      if (c != '\\') {
        out += c;
        advance();
        continue;
      }
      advance();
      char e = peek();
      if (at_end()) fail_at(start, "this string is never closed (missing \")");
      advance();
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\'':
          out += '\'';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && peek() == '\\' && pos_ + 1 < s_.size() && s_[pos_ + 1] == 'u') {
            advance();
            advance();
            uint32_t lo = parse_hex4();
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail_here(fmt::format("unknown escape \\{} in a string", e));
      }
    }
  }

  JsonValue parse_array(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::array;
    v.loc = here();
    advance();
    for (;;) {
      skip_space();
      if (at_end()) fail_at(v.loc, "this [ is never closed (missing ])");
      if (peek() == ']') {
        advance();
        return v;
      }
      v.items.push_back(parse_value(depth + 1));
      bool newline = skip_space();
      if (at_end()) fail_at(v.loc, "this [ is never closed (missing ])");
      if (peek() == ',') {
        advance();
      } else if (peek() != ']' && !newline) {
        fail_here(fmt::format("expected ',' or ']' in the array, found {}", show_char()));
      }
    }
  }

  JsonValue parse_object(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::object;
    v.loc = here();
    advance();
    std::set<std::string, std::less<>> seen;
    for (;;) {
      skip_space();
      if (at_end()) fail_at(v.loc, "this { is never closed (missing })");
      if (peek() == '}') {
        advance();
        return v;
      }
      JsonMember m;
      m.key_loc = here();
      if (peek() != '"' && peek() != '\'') {
        fail_here(fmt::format("expected a key in double quotes or '}}', found {}", show_char()));
      }
      m.key = parse_string();
      if (!seen.insert(m.key).second) {
        const JsonMember* first = nullptr;
        for (const auto& other : v.members)
          if (other.key == m.key) first = &other;
        fail_at(m.key_loc,
                fmt::format("duplicate key \"{}\" (first given at line {}); DeepSpeed rejects duplicate keys", m.key,
                            first ? first->key_loc.line : 0));
      }
      skip_space();
      if (peek() != ':') fail_here(fmt::format("expected ':' after the key \"{}\", found {}", m.key, show_char()));
      advance();
      skip_space();
      m.value = parse_value(depth + 1);
      v.members.push_back(std::move(m));
      bool newline = skip_space();
      if (at_end()) fail_at(v.loc, "this { is never closed (missing })");
      if (peek() == ',') {
        advance();
      } else if (peek() != '}' && !newline) {
        fail_here(
            fmt::format("expected ',' or '}}' after the value of \"{}\", found {}", v.members.back().key, show_char()));
      }
    }
  }
};

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& m : members)
    if (m.key == key) return &m.value;
  return nullptr;
}

const char* kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::null:
      return "null";
    case JsonValue::Kind::boolean:
      return "a boolean";
    case JsonValue::Kind::integer:
      return "an integer";
    case JsonValue::Kind::number:
      return "a number";
    case JsonValue::Kind::string:
      return "a string";
    case JsonValue::Kind::array:
      return "an array";
    case JsonValue::Kind::object:
      return "an object";
  }
  return "?";
}

std::string JsonValue::describe() const {
  switch (kind) {
    case Kind::null:
      return "null";
    case Kind::boolean:
      return boolean ? "true" : "false";
    case Kind::integer:
    case Kind::number:
      return text.empty() ? fmt::format("{}", number) : shorten(text);
    case Kind::string:
      if (text.size() > kEchoLimit)
        return fmt::format("{}… ({} characters)", json_quote(std::string_view(text).substr(0, kEchoLimit)),
                           text.size());
      return json_quote(text);
    case Kind::array:
      return fmt::format("an array of {}", items.size());
    case Kind::object:
      return "an object";
  }
  return "?";
}

std::string shorten(std::string_view text) {
  if (text.size() <= kEchoLimit) return std::string(text);
  return fmt::format("{}… ({} characters)", text.substr(0, kEchoLimit), text.size());
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

std::string to_json_text(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::null:
      return "null";
    case JsonValue::Kind::boolean:
      return v.boolean ? "true" : "false";
    case JsonValue::Kind::integer:
      return fmt::format("{}", v.integer);
    case JsonValue::Kind::number:
      if (std::isinf(v.number)) return v.number > 0 ? "Infinity" : "-Infinity";
      if (std::isnan(v.number)) return "NaN";
      return fmt::format("{}", v.number);
    case JsonValue::Kind::string:
      return json_quote(v.text);
    case JsonValue::Kind::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i) out += (i ? ", " : "") + to_json_text(v.items[i]);
      return out + "]";
    }
    case JsonValue::Kind::object: {
      std::string out = "{";
      for (size_t i = 0; i < v.members.size(); ++i)
        out += (i ? ", " : "") + json_quote(v.members[i].key) + ": " + to_json_text(v.members[i].value);
      return out + "}";
    }
  }
  return "null";
}

JsonValue parse_json(std::string_view text) {
  return Parser(text).parse_document();
}

}  // namespace dscpp::config
