// Example files of the model families: JSON lines (plain or gzip-compressed), one object a line,
// mapped to examples on several threads in file order. Every error names the file and line.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dscpp::models {

// A line's problem; the reader puts the file and line in front.
struct BadLine {
  std::string what;
};

// "\"a\", \"b\"" (or "none"), and "an array"/"a string"/"null", for messages.
std::string keys_of(const nlohmann::json& object);
std::string a_type(const nlohmann::json& v);

// Throws a BadLine unless `id` is a token id, and below `vocab` when vocab > 0.
void check_token_id(int64_t id, const std::string& where, int64_t vocab);
// line[key] as token ids (checked as above); in "labels" also -100, transformers' "no loss".
std::vector<int32_t> token_ids(const nlohmann::json& line, const char* key, int64_t vocab);

struct JsonLine {
  int64_t number;  // 1-based, counting blank lines
  std::string text;
};
// The non-blank lines of `path`; fails when it cannot be read or holds none.
std::vector<JsonLine> read_json_lines(const std::string& path);
// The line as a JSON object, or a BadLine saying what it is instead.
nlohmann::json parse_object(const JsonLine& line);
[[noreturn]] void fail_at(const std::string& path, int64_t line, const std::string& what);

// Maps every line of `path` with `fn` (which throws BadLine, or returns nothing to skip the line) on
// `threads` threads, in contiguous chunks that each stop at their first bad line: the first chunk
// with one holds the file's first, so the error is the same at any thread count.
template <typename T>
std::vector<T> map_json_lines(const std::string& path, int threads,
                              const std::function<std::optional<T>(const nlohmann::json&)>& fn) {
  std::vector<JsonLine> lines = read_json_lines(path);
  struct Chunk {
    std::vector<T> out;
    std::optional<std::pair<int64_t, std::string>> error;  // line number, message
  };
  const size_t n_chunks = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), lines.size());
  std::vector<Chunk> chunks(n_chunks);
  const auto run = [&](size_t c) {
    for (size_t i = lines.size() * c / n_chunks; i < lines.size() * (c + 1) / n_chunks; ++i) {
      try {
        if (auto x = fn(parse_object(lines[i]))) chunks[c].out.push_back(std::move(*x));
      } catch (const BadLine& b) {
        chunks[c].error = {lines[i].number, b.what};
        return;
      } catch (const std::exception& e) {  // out of memory, say: nothing may leave a worker thread
        chunks[c].error = {lines[i].number, e.what()};
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
  std::vector<T> out;
  for (Chunk& chunk : chunks) {
    if (chunk.error) fail_at(path, chunk.error->first, chunk.error->second);
    std::move(chunk.out.begin(), chunk.out.end(), std::back_inserter(out));
  }
  return out;
}

}  // namespace dscpp::models
