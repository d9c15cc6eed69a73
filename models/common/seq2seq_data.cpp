#include "models/common/seq2seq_data.h"

#include "dscpp/layers.h"
#include "models/common/json_lines.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <utility>

namespace dscpp::models {

using layers::fail;
using nlohmann::json;

namespace {

Seq2SeqExample pre_tokenized(const json& line, const Seq2SeqOptions& opt) {
  if (!line.contains("labels"))
    throw BadLine{"no \"labels\" beside \"input_ids\" (the line's keys: " + keys_of(line) + ")"};
  Seq2SeqExample ex{token_ids(line, "input_ids", opt.vocab_size), token_ids(line, "labels", opt.vocab_size)};
  if (line.contains("attention_mask")) {
    const json& mask = line["attention_mask"];
    if (!mask.is_array() || mask.size() != ex.input_ids.size())
      throw BadLine{"attention_mask is " + (mask.is_array() ? std::to_string(mask.size()) + " long" : a_type(mask)) +
                    ", expected an array as long as input_ids (" + std::to_string(ex.input_ids.size()) + ")"};
    size_t ones = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      const bool one = mask[i] == 1, zero = mask[i] == 0;
      if (!(mask[i].is_number_integer() && (one || zero)) || (one && ones != i))
        throw BadLine{"attention_mask[" + std::to_string(i) + "] is " + mask[i].dump() +
                      "; a mask must be ones, then zeros where input_ids is padded"};
      ones += one;
    }
    if (ones == 0) throw BadLine{"attention_mask has no ones: input_ids would be empty"};
    ex.input_ids.resize(ones);
  }
  const auto check_length = [](const std::vector<int32_t>& ids, const char* key, const char* flag, int64_t max) {
    if (static_cast<int64_t>(ids.size()) > max)
      throw BadLine{std::string(key) + " has " + std::to_string(ids.size()) + " ids, more than --" + flag + " " +
                    std::to_string(max) + " (already tokenized examples are not cut)"};
  };
  check_length(ex.input_ids, "input_ids", "max_source_length", opt.max_source_length);
  check_length(ex.labels, "labels", "max_target_length", opt.max_target_length);
  return ex;
}

// tokenizer(text, max_length=max, truncation=True) of transformers: the text's ids are cut so that
// they and the special tokens fit.
std::vector<int32_t> encode(const tok::Tokenizer& t, const std::string& text, const char* side, const char* flag,
                            int64_t max, const Seq2SeqOptions& opt, bool* cut) {
  std::vector<int32_t> content;
  try {
    content = t.encode(text, false);
  } catch (const std::exception& e) {
    throw BadLine{std::string(side) + ": " + e.what()};
  }
  const auto& prefix = t.special_prefix();
  const auto& suffix = t.special_suffix();
  const int64_t total = static_cast<int64_t>(prefix.size() + content.size() + suffix.size());
  if (total > max) {
    if (!opt.truncation)
      throw BadLine{std::string(side) + " has " + std::to_string(total) + " tokens, more than --" + flag + " " +
                    std::to_string(max) + " (add --truncation to cut it)"};
    const size_t keep = static_cast<size_t>(max) - prefix.size() - suffix.size();
    if (t.truncates_left()) content.erase(content.begin(), content.end() - static_cast<ptrdiff_t>(keep));
    else content.resize(keep);
    *cut = true;
  }
  std::vector<int32_t> ids(prefix);
  ids.insert(ids.end(), content.begin(), content.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  if (ids.empty()) throw BadLine{std::string(side) + " has no tokens"};
  for (size_t i = 0; i < ids.size(); ++i)
    check_token_id(ids[i], std::string(side) + " token " + std::to_string(i), opt.vocab_size);
  return ids;
}

// The source and target texts of a line, or nothing for a summarization pair run_summarization drops.
std::optional<std::pair<std::string, std::string>> texts(const json& line, const Seq2SeqOptions& opt) {
  if (!opt.source_lang.empty()) {
    if (!line.contains("translation"))
      throw BadLine{"no \"translation\" object (the line's keys: " + keys_of(line) + ")"};
    const json& pair = line["translation"];
    if (!pair.is_object()) throw BadLine{"\"translation\" is " + a_type(pair) + ", expected an object"};
    const auto side = [&](const std::string& lang) {
      const std::string key = lang.substr(0, lang.find('_'));
      if (!pair.contains(key))
        throw BadLine{"\"translation\" has no \"" + key + "\" (its keys: " + keys_of(pair) + ")"};
      if (!pair[key].is_string())
        throw BadLine{"translation." + key + " is " + a_type(pair[key]) + ", expected a string"};
      return pair[key].get<std::string>();
    };
    return std::pair{opt.source_prefix + side(opt.source_lang), side(opt.target_lang)};
  }
  for (const std::string* key : {&opt.text_column, &opt.summary_column})
    if (!line.contains(*key)) throw BadLine{"no \"" + *key + "\" key (the line's keys: " + keys_of(line) + ")"};
  const json &text = line[opt.text_column], &summary = line[opt.summary_column];
  if (text.is_null() || text == "" || summary.is_null() || summary == "") return std::nullopt;
  for (const std::string* key : {&opt.text_column, &opt.summary_column})
    if (!line[*key].is_string()) throw BadLine{*key + " is " + a_type(line[*key]) + ", expected a string"};
  return std::pair{opt.source_prefix + text.get<std::string>(), summary.get<std::string>()};
}

std::optional<Seq2SeqExample> example(const json& line, const Seq2SeqOptions& opt, const tok::Tokenizer* t,
                                      Seq2SeqCounts& counts) {
  if (line.contains("input_ids")) return pre_tokenized(line, opt);
  if (opt.source_lang.empty() && opt.text_column.empty())
    throw BadLine{"a text example (the line's keys: " + keys_of(line) +
                  "), but neither --source_lang/--target_lang (translation) nor --text_column/--summary_column "
                  "(summarization) was given"};
  if (t == nullptr)
    throw BadLine{
        "a text example needs a tokenizer, and none was given (tokenized lines hold \"input_ids\" and "
        "\"labels\")"};
  const auto pair = texts(line, opt);
  if (!pair) {
    ++counts.skipped;
    return std::nullopt;
  }
  bool cut_source = false, cut_target = false;
  Seq2SeqExample ex{encode(*t, pair->first, "source", "max_source_length", opt.max_source_length, opt, &cut_source),
                    encode(*t, pair->second, "target", "max_target_length", opt.max_target_length, opt, &cut_target)};
  counts.truncated_sources += cut_source;
  counts.truncated_targets += cut_target;
  return ex;
}

void check_options(const Seq2SeqOptions& opt, const tok::Tokenizer* t) {
  const auto both_or_none = [](const std::string& a, const std::string& b, const char* na, const char* nb) {
    if (a.empty() != b.empty())
      fail(DSCPP_E_INVALID_ARGUMENT,
           std::string("--") + (a.empty() ? nb : na) + " is given without --" + (a.empty() ? na : nb));
  };
  both_or_none(opt.source_lang, opt.target_lang, "source_lang", "target_lang");
  both_or_none(opt.text_column, opt.summary_column, "text_column", "summary_column");
  if (!opt.source_lang.empty() && !opt.text_column.empty())
    fail(DSCPP_E_INVALID_ARGUMENT,
         "give --source_lang/--target_lang (translation) or --text_column/--summary_column (summarization), not both");
  if (opt.threads < 1) fail(DSCPP_E_INVALID_ARGUMENT, "seq2seq data: threads must be at least 1");
  const int64_t specials = t ? static_cast<int64_t>(t->special_prefix().size() + t->special_suffix().size()) : 0;
  for (const auto& [flag, max] : {std::pair{"max_source_length", opt.max_source_length},
                                  std::pair{"max_target_length", opt.max_target_length}}) {
    const std::string given = std::string("--") + flag + " " + std::to_string(max);
    if (max < 1) fail(DSCPP_E_INVALID_ARGUMENT, given + ": must be at least 1");
    // transformers would leave such a sequence uncut, longer than the maximum.
    if (max < specials)
      fail(DSCPP_E_INVALID_ARGUMENT, given + " is less than the " + std::to_string(specials) +
                                         " special tokens the tokenizer adds to every sequence");
  }
}

}  // namespace

std::vector<Seq2SeqExample> read_seq2seq(const std::string& path, const Seq2SeqOptions& opt,
                                         const tok::Tokenizer* tokenizer, Seq2SeqCounts* counts) {
  check_options(opt, tokenizer);
  std::atomic<int64_t> skipped = 0, truncated_sources = 0, truncated_targets = 0;
  std::vector<Seq2SeqExample> out =
      map_json_lines<Seq2SeqExample>(path, opt.threads, [&](const json& line) -> std::optional<Seq2SeqExample> {
        Seq2SeqCounts c;
        auto ex = example(line, opt, tokenizer, c);
        skipped += c.skipped;
        truncated_sources += c.truncated_sources;
        truncated_targets += c.truncated_targets;
        return ex;
      });
  Seq2SeqCounts total;
  total.skipped = skipped;
  total.truncated_sources = truncated_sources;
  total.truncated_targets = truncated_targets;
  total.examples = static_cast<int64_t>(out.size());
  if (out.empty())
    fail(DSCPP_E_IO, path + ": no examples: every one of its " + std::to_string(total.skipped) +
                         " pairs has an empty text or summary");
  if (counts != nullptr) *counts = total;
  return out;
}

}  // namespace dscpp::models
