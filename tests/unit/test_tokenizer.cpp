// The tokenizer library's refusals (each naming the file and the JSON path or byte) and the
// split behaviours of the tokenizers library's pre-tokenizers, on the example its
// documentation gives for SplitDelimiterBehavior ("the-final--countdown").
#include "tokenizer/components.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dscpp;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

// A tokenizer.json with `text` in a fresh directory; returns the directory.
std::string write_tokenizer(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("dscpp_test_tokenizer_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << text;
  return dir.string();
}

// A byte-level BPE with the vocabulary {a, b, ab} and the merge "a b".
std::string bpe_json(const std::string& merges,
                     const std::string& pre = R"({"type": "ByteLevel", "add_prefix_space": false})") {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": )" + pre +
         R"(, "post_processor": null, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": )" +
         merges + "}}";
}

std::vector<std::string> split(const std::string& behavior, const std::string& text) {
  const auto p = tok::make_pre_tokenizer(
      nlohmann::json::parse(R"({"type": "Split", "pattern": {"String": "-"}, "invert": false, "behavior": ")" +
                            behavior + "\"}"),
      tok::Where{"t.json"});
  std::vector<std::string> out;
  p->split(text, out);
  return out;
}

}  // namespace

TEST_CASE("a valid byte-level BPE encodes and decodes", "[tokenizer]") {
  const tok::Tokenizer t = tok::Tokenizer::load(write_tokenizer("ok", bpe_json(R"(["a b"])")));
  CHECK(t.encode("abba") == std::vector<int32_t>{2, 1, 0});
  CHECK(t.decode(std::vector<int32_t>{2, 1, 0}) == "abba");
  CHECK(t.token_to_id("ab") == 2);
  CHECK(t.vocab_size() == 3);
}

TEST_CASE("bad tokenizer files are refused naming the file and the place", "[tokenizer]") {
  const std::string truncated = write_tokenizer("truncated", bpe_json(R"(["a b"])").substr(0, 80));
  CHECK_THROWS_WITH(tok::Tokenizer::load(truncated), Contains("tokenizer.json: not valid JSON (byte"));
  CHECK_THROWS_WITH(
      tok::Tokenizer::load(write_tokenizer("wordlevel", R"({"model": {"type": "WordLevel", "vocab": {}}})")),
      Contains("tokenizer.json: $.model.type: the WordLevel model is not supported yet"));
  CHECK_THROWS_WITH(tok::Tokenizer::load(write_tokenizer("merge", bpe_json(R"(["a b", "b zz"])"))),
                    Contains("$.model.merges[1]: merge names \"zz\", which is not in the vocabulary"));
  CHECK_THROWS_WITH(
      tok::Tokenizer::load(write_tokenizer(
          "pre", bpe_json(R"(["a b"])",
                          R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Bogus"}]})"))),
      Contains("$.pre_tokenizer.pretokenizers[1].type: unknown pre-tokenizer \"Bogus\""));
  CHECK_THROWS_WITH(tok::Tokenizer::load(write_tokenizer("none", "")), Contains("not valid JSON"));
  CHECK_THROWS_WITH(tok::Tokenizer::load("/nonexistent/dir"), Contains("/nonexistent/dir: no tokenizer.json"));
}

TEST_CASE("text that is not UTF-8 is refused with its byte offset", "[tokenizer]") {
  const tok::Tokenizer t = tok::Tokenizer::load(write_tokenizer("utf8", bpe_json(R"(["a b"])")));
  CHECK_THROWS_WITH(t.encode("ab\xC3("), Contains("not valid UTF-8 (byte 2)"));
  CHECK_NOTHROW(t.encode("ab\xEF\xBF\xBD"));  // U+FFFD itself is valid
}

TEST_CASE("Split's delimiter behaviours, as the tokenizers library documents them", "[tokenizer]") {
  const std::string s = "the-final--countdown";
  using V = std::vector<std::string>;
  CHECK(split("Removed", s) == V{"the", "final", "countdown"});
  CHECK(split("Isolated", s) == V{"the", "-", "final", "-", "-", "countdown"});
  CHECK(split("MergedWithPrevious", s) == V{"the-", "final-", "-", "countdown"});
  CHECK(split("MergedWithNext", s) == V{"the", "-final", "-", "-countdown"});
  CHECK(split("Contiguous", s) == V{"the", "-", "final", "--", "countdown"});
  CHECK_THROWS_WITH(split("Sideways", s), Contains("t.json: $.behavior: unknown split behavior \"Sideways\""));
}
