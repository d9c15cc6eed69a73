#include "configs/load.h"

#include "configs/resolve.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dscpp::config {
namespace {

// DeepSpeed accepts the config as URL-safe base64 of the JSON text in place of a path.
std::optional<std::string> decode_base64(std::string_view s) {
  if (s.size() < 4) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : s) {
    int v;
    if (ch >= 'A' && ch <= 'Z')
      v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z')
      v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9')
      v = ch - '0' + 52;
    else if (ch == '-' || ch == '+')
      v = 62;
    else if (ch == '_' || ch == '/')
      v = 63;
    else if (ch == '=')
      break;
    else
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  size_t first = out.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || out[first] != '{') return std::nullopt;
  return out;
}

// `"zero_optimization": true` is DeepSpeed's legacy spelling of stage 1 with the top-level
// allgather_size as bucket size; rewrite it so the reader sees the modern block.
void rewrite_legacy_zero(JsonValue& root, LoadedConfig& out) {
  for (auto& m : root.members) {
    if (m.key != "zero_optimization" || m.value.kind != JsonValue::Kind::boolean) continue;
    bool on = m.value.boolean;
    Location loc = m.value.loc;
    out.diagnostics.warning("zero_optimization", loc,
                            "a boolean zero_optimization is deprecated; write {\"stage\": 1} (true) or {\"stage\": 0}");
    JsonValue block;
    block.kind = JsonValue::Kind::object;
    block.loc = loc;
    JsonValue stage;
    stage.kind = JsonValue::Kind::integer;
    stage.integer = on ? 1 : 0;
    stage.number = static_cast<double>(stage.integer);
    stage.loc = loc;
    block.members.push_back({"stage", loc, stage});
    if (on) {
      if (const JsonValue* size = root.find("allgather_size"))
        block.members.push_back({"allgather_bucket_size", loc, *size});
    }
    m.value = std::move(block);
  }
}

}  // namespace

std::string describe_origin(const Origin& o) {
  std::string line = o.loc.line ? fmt::format(" line {}", o.loc.line) : "";
  switch (o.source) {
    case Origin::Source::file:
      return o.detail.empty() ? "config" + line : fmt::format("config{}, {}", line, o.detail);
    case Origin::Source::auto_resolved:
      return fmt::format("auto: {}", o.detail);
    case Origin::Source::derived:
      return fmt::format("derived: {}", o.detail);
    case Origin::Source::deprecated_key:
      return o.detail.empty() ? "config" + line + " (deprecated key)" : "config" + line + ", " + o.detail;
    case Origin::Source::auto_default:
      return fmt::format("auto: {}", o.detail);
  }
  return "?";
}

LoadedConfig load_config_text(std::string_view text, std::string_view name, const RunFacts& facts) {
  LoadedConfig out;
  out.file_name = std::string(name);
  JsonValue root;
  try {
    root = parse_json(text);
  } catch (const JsonSyntaxError& e) {
    out.diagnostics.error("", e.loc, fmt::format("invalid JSON: {}", e.what()));
    return out;
  }
  if (root.kind != JsonValue::Kind::object) {
    out.diagnostics.error("", root.loc,
                          fmt::format("a DeepSpeed config is a JSON object {{...}}, found {}", root.describe()));
    return out;
  }
  rewrite_legacy_zero(root, out);
  std::vector<PendingAuto> autos;
  ReadState state{out.diagnostics, out.origins, autos};
  read_config(root, out.config, state);
  // Type errors make later rules report noise about values that were never read.
  if (out.diagnostics.has_errors()) return out;
  apply_deprecations(out);
  resolve_autos(out, autos, facts);
  supply_trainer_defaults(out, facts);
  resolve_batch_sizes(out, facts);
  if (out.diagnostics.has_errors()) return out;
  check_rules(out);
  return out;
}

LoadedConfig load_config_file(const std::string& path, const RunFacts& facts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (auto decoded = decode_base64(path)) return load_config_text(*decoded, "<base64 config>", facts);
    LoadedConfig out;
    out.file_name = path;
    out.diagnostics.error("", {}, fmt::format("cannot read the config file: {}", std::strerror(err)));
    return out;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return load_config_text(buffer.str(), path, facts);
}

}  // namespace dscpp::config
