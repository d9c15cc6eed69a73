// The sequence-to-sequence reader on small files: translation and summarization pairs through a
// T5-like tokenizer (a BPE over {a, b} with </s> appended), token-id lines, truncation and the
// refusals, each naming the file and line. Parity with transformers is the seq2seq_parity test's.
#include "dscpp/layers.h"
#include "seq2seq_data.h"

#include <catch2/catch.hpp>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

using namespace dscpp;
using Catch::Contains;
using models::read_seq2seq;
using models::Seq2SeqOptions;
using Ids = std::vector<int32_t>;

CATCH_TRANSLATE_EXCEPTION(const layers::Failure& f) { return f.message; }

namespace {

namespace fs = std::filesystem;

fs::path dir() {
  const fs::path d = fs::temp_directory_path() / "dscpp_test_seq2seq";
  fs::create_directories(d);
  return d;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path p = dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// <pad> 0, </s> 1, <unk> 2 as in T5; "a b" merges to "ab". `truncation_side` goes to tokenizer_config.json.
tok::Tokenizer tokenizer(const std::string& truncation_side = "") {
  const fs::path d = dir() / ("tokenizer" + truncation_side);
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json") << R"({"version": "1.0", "added_tokens": [
      {"id": 0, "content": "<pad>", "special": true}, {"id": 1, "content": "</s>", "special": true},
      {"id": 2, "content": "<unk>", "special": true}],
    "normalizer": null, "pre_tokenizer": null, "decoder": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "pair": [], "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
    "model": {"type": "BPE", "vocab": {"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3, "b": 4, "ab": 5},
              "merges": ["a b"]}})";
  std::ofstream(d / "tokenizer_config.json")
      << (truncation_side.empty() ? "{}" : R"({"truncation_side": ")" + truncation_side + "\"}");
  return tok::Tokenizer::load(d.string());
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const layers::Failure& f) {
    return f.message;
  }
  return "(no error)";
}

Seq2SeqOptions translation(const std::string& src = "en", const std::string& tgt = "de") {
  Seq2SeqOptions o;
  o.source_lang = src;
  o.target_lang = tgt;
  return o;
}

}  // namespace

TEST_CASE("translation pairs: prefix, both sides ending in </s>, blank lines skipped", "[seq2seq]") {
  const tok::Tokenizer t = tokenizer();
  const std::string f = write("tr.jsonl", R"({"translation": {"en": "ab", "de": "ba"}}

  {"translation": {"de": "", "en": "aab"}, "id": 7})"
                                          "\r\n");
  Seq2SeqOptions o = translation("en_XX", "de");  // run_translation reads the key before "_"
  o.source_prefix = "b";
  models::Seq2SeqCounts counts;
  const auto ex = read_seq2seq(f, o, &t, &counts);
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].input_ids == Ids{4, 5, 1});  // "bab": b, ab
  CHECK(ex[0].labels == Ids{4, 3, 1});
  CHECK(ex[1].input_ids == Ids{4, 3, 5, 1});
  CHECK(ex[1].labels == Ids{1});  // an empty target is </s> alone, as transformers makes it
  CHECK(counts.examples == 2);
  CHECK(counts.truncated_sources == 0);
}

TEST_CASE("truncation keeps the special tokens; without it a long example names its line", "[seq2seq]") {
  const std::string f = write("long.jsonl", "\n" R"({"translation": {"en": "aabb", "de": "abababab"}})" "\n");
  Seq2SeqOptions o = translation();
  o.max_source_length = 3;
  o.max_target_length = 4;
  const tok::Tokenizer right = tokenizer(), left = tokenizer("left");
  CHECK(error_of([&] { read_seq2seq(f, o, &right); }) ==
        f + ":2: source has 4 tokens, more than --max_source_length 3 (add --truncation to cut it)");
  o.max_source_length = 4;
  CHECK(error_of([&] { read_seq2seq(f, o, &right); }) ==
        f + ":2: target has 5 tokens, more than --max_target_length 4 (add --truncation to cut it)");
  o.truncation = true;
  o.max_source_length = 3;
  models::Seq2SeqCounts counts;
  auto ex = read_seq2seq(f, o, &right, &counts);
  CHECK(ex[0].input_ids == Ids{3, 5, 1});  // a, ab, b cut to two
  CHECK(ex[0].labels == Ids{5, 5, 5, 1});
  CHECK(counts.truncated_sources == 1);
  CHECK(counts.truncated_targets == 1);
  ex = read_seq2seq(f, o, &left);
  CHECK(ex[0].input_ids == Ids{5, 4, 1});
  CHECK_THROWS_WITH(tokenizer("middle"), Contains("tokenizer_config.json: $.truncation_side: expected \"left\" or"));
  o.max_source_length = 1;  // room for </s> alone
  CHECK(read_seq2seq(f, o, &right)[0].input_ids == Ids{1});
  o.max_source_length = 0;
  CHECK(error_of([&] { read_seq2seq(f, o, &right); }) == "--max_source_length 0: must be at least 1");
}

TEST_CASE("summarization pairs: top-level columns, empty pairs dropped as run_summarization drops them",
          "[seq2seq]") {
  const tok::Tokenizer t = tokenizer();
  Seq2SeqOptions o;
  o.text_column = "document";
  o.summary_column = "summary";
  const std::string f = write("sum.jsonl", R"({"document": "abab", "summary": "b"}
{"document": "", "summary": "a"}
{"document": "a", "summary": null})");
  models::Seq2SeqCounts counts;
  const auto ex = read_seq2seq(f, o, &t, &counts);
  REQUIRE(ex.size() == 1);
  CHECK(ex[0].input_ids == Ids{5, 5, 1});
  CHECK(counts.skipped == 2);
  const std::string none = write("sum_none.jsonl", R"({"document": null, "summary": "a"})");
  CHECK(error_of([&] { read_seq2seq(none, o, &t); }) ==
        none + ": no examples: every one of its 1 pairs has an empty text or summary");
  const std::string number = write("sum_number.jsonl", R"({"document": 5, "summary": "a"})");
  CHECK(error_of([&] { read_seq2seq(number, o, &t); }) ==
        number + ":1: document is a number, expected a string");
  const std::string missing = write("sum_missing.jsonl", R"({"text": "a", "summary": "a"})");
  CHECK(error_of([&] { read_seq2seq(missing, o, &t); }) ==
        missing + ":1: no \"document\" key (the line's keys: \"summary\", \"text\")");
}

TEST_CASE("token-id lines: the attention mask trims padding, labels keep -100", "[seq2seq]") {
  const std::string f = write("ids.jsonl", R"({"input_ids": [5, 6, 1, 0, 0], "attention_mask": [1, 1, 1, 0, 0], )"
                                           R"("labels": [7, 1, -100]}
{"input_ids": [9], "labels": [1]})");
  Seq2SeqOptions o;  // neither translation nor summarization: id lines need no tokenizer
  o.vocab_size = 10;
  const auto ex = read_seq2seq(f, o, nullptr);
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].input_ids == Ids{5, 6, 1});
  CHECK(ex[0].labels == Ids{7, 1, -100});
  CHECK(ex[1].input_ids == Ids{9});
  const auto bad = [&](const std::string& line) {
    const std::string p = write("bad_ids.jsonl", line);
    return error_of([&] { read_seq2seq(p, o, nullptr); }).substr(p.size());
  };
  CHECK(bad(R"({"input_ids": [1, 2.5], "labels": [1]})") == ":1: input_ids[1] is 2.5, expected an integer token id");
  CHECK(bad(R"({"input_ids": [1, "2"], "labels": [1]})") == ":1: input_ids[1] is \"2\", expected an integer token id");
  CHECK(bad(R"({"input_ids": [1], "labels": [-1]})") == ":1: labels[0] is -1, not a token id");
  CHECK(bad(R"({"input_ids": [-100], "labels": [1]})") == ":1: input_ids[0] is -100, not a token id");
  CHECK(bad(R"({"input_ids": [10], "labels": [1]})") == ":1: input_ids[0] is 10, outside the vocabulary of 10");
  CHECK(bad(R"({"input_ids": [1], "labels": [18446744073709551615]})") ==
        ":1: labels[0] is 18446744073709551615, not a token id");
  CHECK(bad(R"({"input_ids": [1]})") == ":1: no \"labels\" beside \"input_ids\" (the line's keys: \"input_ids\")");
  CHECK(bad(R"({"input_ids": [], "labels": [1]})") == ":1: input_ids is empty");
  CHECK(bad(R"({"input_ids": 3, "labels": [1]})") == ":1: input_ids is a number, expected an array of token ids");
  CHECK(bad(R"({"input_ids": [1, 2], "attention_mask": [1, 0, 1], "labels": [1]})") ==
        ":1: attention_mask is 3 long, expected an array as long as input_ids (2)");
  CHECK(bad(R"({"input_ids": [1, 2, 3], "attention_mask": [1, 0, 1], "labels": [1]})") ==
        ":1: attention_mask[2] is 1; a mask must be ones, then zeros where input_ids is padded");
  CHECK(bad(R"({"input_ids": [1, 2], "attention_mask": [0, 0], "labels": [1]})") ==
        ":1: attention_mask has no ones: input_ids would be empty");
  o.max_target_length = 2;
  CHECK(bad(R"({"input_ids": [1], "labels": [1, 2, 3]})") ==
        ":1: labels has 3 ids, more than --max_target_length 2 (already tokenized examples are not cut)");
}

TEST_CASE("refusals name the file and the line", "[seq2seq]") {
  const tok::Tokenizer t = tokenizer();
  const Seq2SeqOptions o = translation();
  const auto bad = [&](const std::string& text, const tok::Tokenizer* tk) {
    const std::string p = write("bad.jsonl", text);
    return error_of([&] { read_seq2seq(p, o, tk); }).substr(p.size());
  };
  CHECK_THAT(bad("\n\n{\"translation\": {\"en\": \"a\", ", &t), Contains(":3: not JSON: [json.exception.parse_error"));
  CHECK(bad("[1, 2]", &t) == ":1: expected a JSON object (one example a line), found an array");
  CHECK(bad(R"({"en": "a", "de": "b"})", &t) == ":1: no \"translation\" object (the line's keys: \"de\", \"en\")");
  CHECK(bad(R"({"translation": "a"})", &t) == ":1: \"translation\" is a string, expected an object");
  CHECK(bad(R"({"translation": {"en": "a", "fr": "b"}})", &t) ==
        ":1: \"translation\" has no \"de\" (its keys: \"en\", \"fr\")");
  CHECK(bad(R"({"translation": {"en": "a", "de": null}})", &t) == ":1: translation.de is null, expected a string");
  CHECK(bad(R"({"translation": {"en": "a", "de": ["b"]}})", &t) == ":1: translation.de is an array, expected a string");
  CHECK_THAT(bad(R"({"translation": {"en": "a", "de": "b"}})", nullptr),
             Contains(":1: a text example needs a tokenizer, and none was given"));
  const std::string empty = write("empty.jsonl", "\n  \n");
  CHECK(error_of([&] { read_seq2seq(empty, o, &t); }) == empty + ": empty: no examples");
  CHECK_THAT(error_of([&] { read_seq2seq((dir() / "absent.jsonl").string(), o, &t); }), Contains(": cannot open: "));
  const std::string text = write("text.jsonl", R"({"translation": {"en": "a", "de": "b"}})");
  CHECK_THAT(error_of([&] { read_seq2seq(text, Seq2SeqOptions{}, &t); }),
             Contains(":1: a text example (the line's keys: \"translation\"), but neither --source_lang"));
  Seq2SeqOptions half = translation("en", "");
  CHECK(error_of([&] { read_seq2seq(text, half, &t); }) == "--source_lang is given without --target_lang");
  half = translation();
  half.text_column = half.summary_column = "x";
  CHECK_THAT(error_of([&] { read_seq2seq(text, half, &t); }), Contains("not both"));
}

TEST_CASE("gzip input, and threads give the examples and the first error of one thread", "[seq2seq]") {
  const tok::Tokenizer t = tokenizer();
  std::string lines;
  for (int i = 0; i < 50; ++i)
    lines += R"({"translation": {"en": ")" + std::string(i % 7 + 1, i % 2 ? 'a' : 'b') + R"(", "de": "ab"}})" "\n";
  const std::string gz = (dir() / "many.json.gz").string();
  gzFile out = gzopen(gz.c_str(), "wb");
  REQUIRE(out != nullptr);
  gzwrite(out, lines.data(), static_cast<unsigned>(lines.size()));
  gzclose(out);
  Seq2SeqOptions o = translation();
  const auto one = read_seq2seq(write("many.json", lines), o, &t);
  o.threads = 4;
  const auto four = read_seq2seq(gz, o, &t);
  REQUIRE(one.size() == 50);
  REQUIRE(four.size() == 50);
  for (size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].input_ids == four[i].input_ids);
    CHECK(one[i].labels == four[i].labels);
  }
  o.max_source_length = 7;  // lines 7, 14, ... hold 7 letters: 8 tokens with </s>
  const std::string plain = write("many.jsonl", lines);
  CHECK_THAT(error_of([&] { read_seq2seq(plain, o, &t); }), Contains("many.jsonl:7: source has 8 tokens"));
  o.threads = 1;
  CHECK_THAT(error_of([&] { read_seq2seq(plain, o, &t); }), Contains("many.jsonl:7: source has 8 tokens"));
}
