#include "models/common/json_lines.h"

#include "dscpp/layers.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

namespace dscpp::models {

using layers::fail;
using nlohmann::json;

namespace {

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

}  // namespace

std::string keys_of(const json& object) {
  std::string keys;
  for (const auto& [key, value] : object.items()) keys += (keys.empty() ? "\"" : ", \"") + key + "\"";
  return keys.empty() ? "none" : keys;
}

std::string a_type(const json& v) {
  const std::string t = v.type_name();
  return t == "null" ? "null" : (t == "array" || t == "object" ? "an " : "a ") + t;
}

void check_token_id(int64_t id, const std::string& where, int64_t vocab) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    throw BadLine{where + " is " + std::to_string(id) + ", not a token id"};
  if (vocab > 0 && id >= vocab)
    throw BadLine{where + " is " + std::to_string(id) + ", outside the vocabulary of " + std::to_string(vocab)};
}

std::vector<int32_t> token_ids(const json& line, const char* key, int64_t vocab) {
  const json& list = line[key];
  if (!list.is_array()) throw BadLine{std::string(key) + " is " + a_type(list) + ", expected an array of token ids"};
  if (list.empty()) throw BadLine{std::string(key) + " is empty"};
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!list[i].is_number_integer()) throw BadLine{where + " is " + list[i].dump() + ", expected an integer token id"};
    if (list[i].is_number_unsigned() && list[i].get<uint64_t>() > uint64_t{INT32_MAX})
      throw BadLine{where + " is " + list[i].dump() + ", not a token id"};
    const int64_t id = list[i].get<int64_t>();
    if (!(id == -100 && std::strcmp(key, "labels") == 0)) check_token_id(id, where, vocab);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<JsonLine> read_json_lines(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<JsonLine> lines;
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
  if (lines.empty()) fail(DSCPP_E_IO, path + ": empty: no examples");
  return lines;
}

json parse_object(const JsonLine& l) {
  json line;
  try {
    line = json::parse(l.text);
  } catch (const json::parse_error& e) {
    throw BadLine{std::string("not JSON: ") + e.what()};
  }
  if (!line.is_object()) throw BadLine{"expected a JSON object (one example a line), found " + a_type(line)};
  return line;
}

void fail_at(const std::string& path, int64_t line, const std::string& what) {
  fail(DSCPP_E_IO, path + ":" + std::to_string(line) + ": " + what);
}

}  // namespace dscpp::models
