// A JSON tree that remembers where every value came from.
//
// DeepSpeed reads config files with hjson, so comments (`//`, `#`, `/* */`) and trailing
// commas are accepted here too, as are Python's `Infinity`/`NaN` (Accelerate writes
// `steps_per_print: inf`). Unlike a plain JSON library, every value and every object key
// keeps its line and column so that a validation error can point at the exact place, and
// duplicate keys are an error (DeepSpeed rejects them in files).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dscpp::config {

struct Location {
  int line = 0;    // 1-based; 0 = not from a file (a default or a resolved value)
  int column = 0;  // 1-based, in bytes
};

struct JsonMember;

class JsonValue {
 public:
  enum class Kind { null, boolean, integer, number, string, array, object };

  Kind kind = Kind::null;
  bool boolean = false;
  std::int64_t integer = 0;         // kind == integer
  double number = 0;                // kind == number, or integer converted
  std::string text;                 // kind == string: the string; numbers: their source spelling
  std::vector<JsonValue> items;     // kind == array
  std::vector<JsonMember> members;  // kind == object, in file order
  Location loc;

  bool is_null() const { return kind == Kind::null; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::number; }
  bool is_string(std::string_view s) const { return kind == Kind::string && text == s; }
  const JsonValue* find(std::string_view key) const;
  JsonValue* find(std::string_view key) { return const_cast<JsonValue*>(std::as_const(*this).find(key)); }
  // Short rendering for messages: scalars as written, containers summarised.
  std::string describe() const;
};

struct JsonMember {
  std::string key;
  Location key_loc;
  JsonValue value;
};

const char* kind_name(JsonValue::Kind kind);

class JsonSyntaxError : public std::runtime_error {
 public:
  JsonSyntaxError(Location where, const std::string& message) : std::runtime_error(message), loc(where) {}
  Location loc;
};

// Throws JsonSyntaxError with the line and column of the first problem.
JsonValue parse_json(std::string_view text);

// Compact JSON text for a value (used by the effective-config dump and by tests).
std::string to_json_text(const JsonValue& value);
std::string json_quote(std::string_view s);

// What messages echo of a value: at most kEchoLimit characters, then "… (N characters)".
inline constexpr size_t kEchoLimit = 80;
std::string shorten(std::string_view text);

}  // namespace dscpp::config
