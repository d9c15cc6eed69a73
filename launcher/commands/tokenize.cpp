// `dscpp tokenize`: encode and decode with a Hugging Face tokenizer directory, as
// transformers' AutoTokenizer (fast) does.
#include "core/error.h"
#include "launcher/commands/commands.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

namespace dscpp::launcher {

namespace {

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::vector<int32_t> parse_ids(const std::string& text, const std::string& where) {
  std::string s = text;
  if (!s.empty() && s.front() == '[') {
    try {
      return nlohmann::json::parse(s).get<std::vector<int32_t>>();
    } catch (const std::exception& e) {
      fail("{}: expected a JSON array of token ids, found {:?} ({})", where, text, e.what());
    }
  }
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at < s.size()) {
    size_t used = 0;
    try {
      ids.push_back(std::stoi(s.substr(at), &used));
    } catch (const std::exception&) {
      fail("{}: expected comma-separated token ids such as 1,2,3, found {:?}", where, text);
    }
    at += used;
    while (at < s.size() && (s[at] == ',' || s[at] == ' ')) ++at;
  }
  return ids;
}

// Each line of `path` through `f`, with the line's number for messages.
template <typename F>
void each_line(const std::string& path, F&& f) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read it", path);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) f(line, fmt::format("{}:{}", path, n));
}

}  // namespace

int run_tokenize_files(const TokenizeArgs& a, const tok::Tokenizer& t);  // tokenize_data.cpp

int run_tokenize(const TokenizeArgs& a) {
  const tok::Tokenizer t = tok::Tokenizer::load(a.tokenizer);
  if (!a.input.empty()) {
    if (a.output.empty()) fail("dscpp tokenize --input: give --output PREFIX");
    return run_tokenize_files(a, t);
  }
  if (a.encode) std::cout << ids_json(t.encode(*a.encode, a.add_special_tokens)) << '\n';
  if (a.decode) std::cout << t.decode(parse_ids(*a.decode, "--decode"), a.skip_special_tokens) << '\n';
  if (!a.encode_lines.empty())
    each_line(a.encode_lines, [&](const std::string& line, const std::string& where) {
      std::string text;
      try {
        text = nlohmann::json::parse(line).get<std::string>();
      } catch (const std::exception& e) {
        fail("{}: expected a JSON string literal ({})", where, e.what());
      }
      std::cout << ids_json(t.encode(text, a.add_special_tokens)) << '\n';
    });
  if (!a.decode_lines.empty())
    each_line(a.decode_lines, [&](const std::string& line, const std::string& where) {
      std::cout << nlohmann::json(t.decode(parse_ids(line, where), a.skip_special_tokens))
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << '\n';
    });
  if (!a.encode && !a.decode && a.encode_lines.empty() && a.decode_lines.empty())
    fail("dscpp tokenize: give --encode TEXT, --decode IDS, --encode_lines FILE, --decode_lines FILE or --input FILES "
         "--output PREFIX");
  return 0;
}

}  // namespace dscpp::launcher
