// The regular expressions tokenizer.json files carry (GPT-2's and Llama 3's word patterns use
// \p{L}, \p{N}, lookahead and case-insensitive groups), run by PCRE2 in UTF mode with Unicode
// properties for \s, \w and \d, as the Oniguruma engine the `tokenizers` library uses reads them.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dscpp::tok {

class Regex {
 public:
  // Throws dscpp::Error naming `where` and PCRE2's message for a pattern it cannot compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match, left to right, as [begin, end) byte offsets; an empty match
  // advances by one character.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A literal string as a pattern (Split's and Replace's {"String": ...}).
std::string escape_regex(std::string_view literal);

// The regex of a component's "pattern" member: {"Regex": "..."} or {"String": "..."} (a
// literal); `where` names it in messages ("tokenizer.json: $.normalizer.pattern").
std::unique_ptr<Regex> pattern_regex(const nlohmann::json& pattern, const std::string& where);
// `text` with every match of `re` replaced by `content`.
std::string replace_all(const Regex& re, std::string_view text, std::string_view content);

}  // namespace dscpp::tok
