// The location-keeping JSON reader under DeepSpeed's hjson-flavoured input.
#include "configs/json.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dscpp::config;

namespace {
JsonSyntaxError syntax_error(const std::string& text) {
  try {
    parse_json(text);
  } catch (const JsonSyntaxError& e) {
    return e;
  }
  FAIL("expected a syntax error for: " << text);
  return JsonSyntaxError({}, "");
}
}  // namespace

TEST_CASE("values keep their line and column", "[json]") {
  JsonValue v = parse_json("{\n  \"a\": 1,\n  \"bb\": {\"c\": [true, null]}\n}");
  REQUIRE(v.kind == JsonValue::Kind::object);
  REQUIRE(v.members.size() == 2);
  CHECK(v.members[0].key_loc.line == 2);
  CHECK(v.members[0].key_loc.column == 3);
  CHECK(v.members[0].value.loc.line == 2);
  CHECK(v.members[0].value.loc.column == 8);
  const JsonValue* c = v.find("bb")->find("c");
  REQUIRE(c);
  CHECK(c->loc.line == 3);
  CHECK(c->loc.column == 15);
  CHECK(c->items[1].is_null());
}

TEST_CASE("numbers: integers stay exact, 5e8 is a number, big integers overflow to double", "[json]") {
  JsonValue v = parse_json(R"({"i": 9007199254740993, "e": 5e8, "f": -0.25, "big": 99999999999999999999})");
  CHECK(v.find("i")->kind == JsonValue::Kind::integer);
  CHECK(v.find("i")->integer == 9007199254740993LL);
  CHECK(v.find("e")->kind == JsonValue::Kind::number);
  CHECK(v.find("e")->number == 5e8);
  CHECK(v.find("e")->text == "5e8");
  CHECK(v.find("f")->number == -0.25);
  CHECK(v.find("big")->kind == JsonValue::Kind::number);
  CHECK(v.find("big")->number == Approx(1e20));
}

TEST_CASE("hjson conveniences DeepSpeed accepts: comments, trailing commas, Infinity", "[json]") {
  JsonValue v = parse_json(
      "// leading comment\n{\n  # hash comment\n  \"a\": 1, /* block\n comment */ \"b\": [1, 2,],\n"
      "  \"steps_per_print\": Infinity,\n  \"n\": -Infinity, \"m\": NaN,\n}\n");
  CHECK(v.find("a")->integer == 1);
  CHECK(v.find("b")->items.size() == 2);
  CHECK(std::isinf(v.find("steps_per_print")->number));
  CHECK(v.find("n")->number < 0);
  CHECK(std::isnan(v.find("m")->number));
}

TEST_CASE("hjson: a line break separates members and items like a comma", "[json]") {
  JsonValue v = parse_json("{\n \"a\": 1\n \"b\": [1\n 2]\n 'c': 'it\\'s'\n}");
  CHECK(v.find("a")->integer == 1);
  CHECK(v.find("b")->items.size() == 2);
  CHECK(v.find("c")->text == "it's");
}

TEST_CASE("strings: escapes and unicode", "[json]") {
  JsonValue v = parse_json(R"({"s": "a\"b\\c\n\u00e9\ud83d\ude00"})");
  CHECK(v.find("s")->text == "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
}

TEST_CASE("syntax errors name line and column", "[json]") {
  auto e = syntax_error("{\n  \"a\": 1 \"b\": 2\n}");
  CHECK(e.loc.line == 2);
  CHECK(e.loc.column == 10);
  CHECK(std::string(e.what()).find("expected ',' or '}'") != std::string::npos);

  e = syntax_error("{\"a\": tru}");
  CHECK(e.loc.column == 7);
  e = syntax_error("{\"a\": 1,\n \"a\": 2}");
  CHECK(e.loc.line == 2);
  CHECK(std::string(e.what()).find("duplicate key \"a\" (first given at line 1)") != std::string::npos);
  e = syntax_error("{\"a\": [1, 2}");
  CHECK(std::string(e.what()).find("expected ',' or ']'") != std::string::npos);
  e = syntax_error("{\"a\": 1 /* never closed");
  CHECK(std::string(e.what()).find("never closed") != std::string::npos);
  e = syntax_error("");
  CHECK(std::string(e.what()).find("empty") != std::string::npos);
  e = syntax_error("{\"a\": 1e}");
  CHECK(std::string(e.what()).find("exponent") != std::string::npos);
  e = syntax_error("{\"a\": \"x\\q\"}");
  CHECK(std::string(e.what()).find("unknown escape") != std::string::npos);
  e = syntax_error("{a: 1}");
  CHECK(std::string(e.what()).find("double quotes") != std::string::npos);
  e = syntax_error("{\"a\": 'x\"}");
  CHECK(std::string(e.what()).find("never closed") != std::string::npos);
}

TEST_CASE("nesting depth is bounded instead of overflowing the stack", "[json]") {
  std::string deep(100000, '[');
  auto e = syntax_error(deep);
  CHECK(std::string(e.what()).find("nesting deeper") != std::string::npos);
}

TEST_CASE("to_json_text round-trips", "[json]") {
  const char* text = R"({"a": [1, 2.5, "x"], "b": {"c": null, "d": false}})";
  JsonValue v = parse_json(text);
  JsonValue again = parse_json(to_json_text(v));
  CHECK(to_json_text(again) == to_json_text(v));
  CHECK(to_json_text(v) == text);
}
