#include "models/common/seq2seq_data.h"

#include "dscpp/layers.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

namespace dscpp::models {

using layers::fail;
using nlohmann::json;

namespace {

struct Line {
  int64_t number;  // 1-based, counting blank lines
  std::string text;
};

// gzread passes a file that is not gzip through unchanged, so one reader takes both.
std::string read_file(const std::string& path) {
  if (std::filesystem::is_directory(path)) fail(DSCPP_E_IO, path + ": is a directory, expected a JSON lines file");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(DSCPP_E_IO, path + ": cannot open: " + std::strerror(errno));
  std::string bytes;
  std::string chunk(1 << 20, '\0');
  for (;;) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int zerr = 0;
      const std::string what = gzerror(file, &zerr);
      gzclose(file);
      fail(DSCPP_E_IO, path + ": cannot read it: " + what);
    }
    if (n == 0) break;
    bytes.append(chunk, 0, static_cast<size_t>(n));
  }
  gzclose(file);
  return bytes;
}

std::vector<Line> non_blank_lines(const std::string& bytes) {
  std::vector<Line> lines;
  int64_t number = 0;
  for (size_t at = 0; at < bytes.size();) {
    size_t end = bytes.find('\n', at);
    if (end == std::string::npos) end = bytes.size();
    ++number;
    size_t stop = end;
    if (stop > at && bytes[stop - 1] == '\r') --stop;
    if (bytes.find_first_not_of(" \t\r", at) < stop) lines.push_back({number, bytes.substr(at, stop - at)});
    at = end + 1;
  }
  return lines;
}

// The line's problem, thrown with its file and line put in front by the caller.
struct Bad {
  std::string what;
};

std::string keys_of(const json& object) {
  std::string keys;
  for (const auto& [key, value] : object.items()) keys += (keys.empty() ? "\"" : ", \"") + key + "\"";
  return keys.empty() ? "none" : keys;
}

std::string a_type(const json& v) {
  const std::string t = v.type_name();
  return t == "null" ? "null" : (t == "array" || t == "object" ? "an " : "a ") + t;
}

void check_id(int64_t id, const std::string& where, const Seq2SeqOptions& opt) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    throw Bad{where + " is " + std::to_string(id) + ", not a token id"};
  if (opt.vocab_size > 0 && id >= opt.vocab_size)
    throw Bad{where + " is " + std::to_string(id) + ", outside the vocabulary of " + std::to_string(opt.vocab_size)};
}

std::vector<int32_t> ids_at(const json& line, const char* key, const Seq2SeqOptions& opt) {
  if (!line.contains(key)) throw Bad{std::string("no \"") + key + "\" beside \"input_ids\" (the line's keys: " +
                                     keys_of(line) + ")"};
  const json& list = line[key];
  if (!list.is_array()) throw Bad{std::string(key) + " is " + a_type(list) + ", expected an array of token ids"};
  if (list.empty()) throw Bad{std::string(key) + " is empty"};
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!list[i].is_number_integer()) throw Bad{where + " is " + list[i].dump() + ", expected an integer token id"};
    if (list[i].is_number_unsigned() && list[i].get<uint64_t>() > uint64_t{INT32_MAX})
      throw Bad{where + " is " + list[i].dump() + ", not a token id"};
    const int64_t id = list[i].get<int64_t>();
    if (!(id == -100 && std::strcmp(key, "labels") == 0)) check_id(id, where, opt);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

Seq2SeqExample pre_tokenized(const json& line, const Seq2SeqOptions& opt) {
  Seq2SeqExample ex{ids_at(line, "input_ids", opt), ids_at(line, "labels", opt)};
  if (line.contains("attention_mask")) {
    const json& mask = line["attention_mask"];
    if (!mask.is_array() || mask.size() != ex.input_ids.size())
      throw Bad{"attention_mask is " + (mask.is_array() ? std::to_string(mask.size()) + " long" : a_type(mask)) +
                ", expected an array as long as input_ids (" + std::to_string(ex.input_ids.size()) + ")"};
    size_t ones = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      const bool one = mask[i] == 1, zero = mask[i] == 0;
      if (!(mask[i].is_number_integer() && (one || zero)) || (one && ones != i))
        throw Bad{"attention_mask[" + std::to_string(i) + "] is " + mask[i].dump() +
                  "; a mask must be ones, then zeros where input_ids is padded"};
      ones += one;
    }
    if (ones == 0) throw Bad{"attention_mask has no ones: input_ids would be empty"};
    ex.input_ids.resize(ones);
  }
  const auto check_length = [](const std::vector<int32_t>& ids, const char* key, const char* flag, int64_t max) {
    if (static_cast<int64_t>(ids.size()) > max)
      throw Bad{std::string(key) + " has " + std::to_string(ids.size()) + " ids, more than --" + flag + " " +
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
    throw Bad{std::string(side) + ": " + e.what()};
  }
  const auto& prefix = t.special_prefix();
  const auto& suffix = t.special_suffix();
  const int64_t total = static_cast<int64_t>(prefix.size() + content.size() + suffix.size());
  if (total > max) {
    if (!opt.truncation)
      throw Bad{std::string(side) + " has " + std::to_string(total) + " tokens, more than --" + flag + " " +
                std::to_string(max) + " (add --truncation to cut it)"};
    const size_t keep = static_cast<size_t>(max) - prefix.size() - suffix.size();
    if (t.truncates_left()) content.erase(content.begin(), content.end() - static_cast<ptrdiff_t>(keep));
    else content.resize(keep);
    *cut = true;
  }
  std::vector<int32_t> ids(prefix);
  ids.insert(ids.end(), content.begin(), content.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  if (ids.empty()) throw Bad{std::string(side) + " has no tokens"};
  for (size_t i = 0; i < ids.size(); ++i) check_id(ids[i], std::string(side) + " token " + std::to_string(i), opt);
  return ids;
}

// The source and target texts of a line, or nothing for a summarization pair run_summarization drops.
std::optional<std::pair<std::string, std::string>> texts(const json& line, const Seq2SeqOptions& opt) {
  if (!opt.source_lang.empty()) {
    if (!line.contains("translation"))
      throw Bad{"no \"translation\" object (the line's keys: " + keys_of(line) + ")"};
    const json& pair = line["translation"];
    if (!pair.is_object()) throw Bad{"\"translation\" is " + a_type(pair) + ", expected an object"};
    const auto side = [&](const std::string& lang) {
      const std::string key = lang.substr(0, lang.find('_'));
      if (!pair.contains(key)) throw Bad{"\"translation\" has no \"" + key + "\" (its keys: " + keys_of(pair) + ")"};
      if (!pair[key].is_string()) throw Bad{"translation." + key + " is " + a_type(pair[key]) + ", expected a string"};
      return pair[key].get<std::string>();
    };
    return std::pair{opt.source_prefix + side(opt.source_lang), side(opt.target_lang)};
  }
  for (const std::string* key : {&opt.text_column, &opt.summary_column})
    if (!line.contains(*key)) throw Bad{"no \"" + *key + "\" key (the line's keys: " + keys_of(line) + ")"};
  const json &text = line[opt.text_column], &summary = line[opt.summary_column];
  if (text.is_null() || text == "" || summary.is_null() || summary == "") return std::nullopt;
  for (const std::string* key : {&opt.text_column, &opt.summary_column})
    if (!line[*key].is_string()) throw Bad{*key + " is " + a_type(line[*key]) + ", expected a string"};
  return std::pair{opt.source_prefix + text.get<std::string>(), summary.get<std::string>()};
}

std::optional<Seq2SeqExample> example(const Line& l, const Seq2SeqOptions& opt, const tok::Tokenizer* t,
                                      Seq2SeqCounts& counts) {
  json line;
  try {
    line = json::parse(l.text);
  } catch (const json::parse_error& e) {
    throw Bad{std::string("not JSON: ") + e.what()};
  }
  if (!line.is_object()) throw Bad{"expected a JSON object (one example a line), found " + a_type(line)};
  if (line.contains("input_ids")) return pre_tokenized(line, opt);
  if (opt.source_lang.empty() && opt.text_column.empty())
    throw Bad{"a text example (the line's keys: " + keys_of(line) +
              "), but neither --source_lang/--target_lang (translation) nor --text_column/--summary_column "
              "(summarization) was given"};
  if (t == nullptr)
    throw Bad{"a text example needs a tokenizer, and none was given (tokenized lines hold \"input_ids\" and "
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
  std::vector<Line> lines = non_blank_lines(read_file(path));
  if (lines.empty()) fail(DSCPP_E_IO, path + ": empty: no examples");

  // Contiguous chunks, each stopping at its first bad line: the first chunk with one holds the
  // file's first, so the error is the same at any thread count.
  struct Chunk {
    std::vector<Seq2SeqExample> examples;
    Seq2SeqCounts counts;
    std::optional<std::pair<int64_t, std::string>> error;  // line number, message
  };
  const size_t n_chunks = std::min<size_t>(static_cast<size_t>(opt.threads), lines.size());
  std::vector<Chunk> chunks(n_chunks);
  const auto run = [&](size_t c) {
    Chunk& chunk = chunks[c];
    for (size_t i = lines.size() * c / n_chunks; i < lines.size() * (c + 1) / n_chunks; ++i) {
      try {
        if (auto ex = example(lines[i], opt, tokenizer, chunk.counts)) chunk.examples.push_back(std::move(*ex));
      } catch (const Bad& b) {
        chunk.error = {lines[i].number, b.what};
        return;
      } catch (const std::exception& e) {  // out of memory, say: nothing may leave a worker thread
        chunk.error = {lines[i].number, e.what()};
        return;
      }
    }
  };
  if (n_chunks == 1) {
    run(0);
  } else {
    std::vector<std::thread> workers;
    for (size_t c = 0; c < n_chunks; ++c) workers.emplace_back(run, c);
    for (auto& w : workers) w.join();
  }
  lines = {};

  std::vector<Seq2SeqExample> out;
  Seq2SeqCounts total;
  for (Chunk& chunk : chunks) {
    if (chunk.error) fail(DSCPP_E_IO, path + ":" + std::to_string(chunk.error->first) + ": " + chunk.error->second);
    total.skipped += chunk.counts.skipped;
    total.truncated_sources += chunk.counts.truncated_sources;
    total.truncated_targets += chunk.counts.truncated_targets;
    std::move(chunk.examples.begin(), chunk.examples.end(), std::back_inserter(out));
  }
  total.examples = static_cast<int64_t>(out.size());
  if (out.empty())
    fail(DSCPP_E_IO, path + ": no examples: every one of its " + std::to_string(total.skipped) +
                         " pairs has an empty text or summary");
  if (counts != nullptr) *counts = total;
  return out;
}

}  // namespace dscpp::models
