// The launch plan's rules (launch_plan.h): rank numbering, the per-rank environment and
// DeepSpeed's world-info encoding (§6).
#include "launcher/launch_plan.h"

#include "configs/json.h"
#include "core/error.h"

#include <algorithm>
#include <climits>
#include <set>

namespace dscpp::launcher {
namespace {

constexpr std::string_view kRankVariables[] = {
    "RANK",       "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE",  "LOCAL_WORLD_SIZE",
    "CROSS_RANK", "CROSS_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};

std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

// Python's json.dumps string with ensure_ascii=True: non-ASCII as \uXXXX (surrogate pairs
// above U+FFFF), so the encoding of a host name matches DeepSpeed's byte for byte.
std::string python_json_string(std::string_view s) {
  std::string out = "\"";
  auto escape = [&](unsigned cp) { out += fmt::format("\\u{:04x}", cp); };
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || c == 0x7f)
            escape(c);
          else
            out += static_cast<char>(c);
      }
      continue;
    }
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    if (len == 0 || c >= 0xf8 || i + len > s.size()) fail("host name \"{}\" is not valid UTF-8", s);
    unsigned cp = c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont & 0xc0) != 0x80) fail("host name \"{}\" is not valid UTF-8", s);
      cp = (cp << 6) | (cont & 0x3f);
    }
    i += len;
    if (cp >= 0x10000) {
      escape(0xd800 + ((cp - 0x10000) >> 10));
      escape(0xdc00 + ((cp - 0x10000) & 0x3ff));
    } else {
      escape(cp);
    }
  }
  return out + "\"";
}

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-' || c == '+') return 62;
  if (c == '_' || c == '/') return 63;
  return -1;
}

std::string base64_decode(std::string_view in) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    int v = base64_value(in[i]);
    if (v < 0)
      fail("--world_info: found '{}' at offset {}; expected URL-safe base64 (A-Z a-z 0-9 - _, '=' padding at the end)",
           in[i], i);
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  if (in.size() % 4 == 1)
    fail("--world_info: {} base64 characters cannot be a whole number of bytes; is it truncated?", in.size());
  return out;
}

}  // namespace

int WorldPlan::world_size() const {
  int n = 0;
  for (const auto& h : hosts) n += static_cast<int>(h.slots.size());
  return n;
}

std::vector<RankInfo> WorldPlan::ranks() const {
  std::vector<RankInfo> out;
  int rank = 0;
  for (size_t node = 0; node < hosts.size(); ++node)
    for (size_t k = 0; k < hosts[node].slots.size(); ++k)
      out.push_back({rank++, static_cast<int>(k), static_cast<int>(node), hosts[node].slots[k], hosts[node].host});
  return out;
}

std::vector<RankInfo> WorldPlan::ranks_on(int node_rank) const {
  if (node_rank < 0 || node_rank >= node_count())
    fail("node rank {} is out of range; the plan has {} node(s), expected 0..{}", node_rank, node_count(),
         node_count() - 1);
  std::vector<RankInfo> out;
  for (RankInfo& r : ranks())
    if (r.node_rank == node_rank) out.push_back(std::move(r));
  return out;
}

bool is_rank_variable(std::string_view name) {
  return std::find(std::begin(kRankVariables), std::end(kRankVariables), name) != std::end(kRankVariables);
}

void set_env(EnvList& env, std::string_view name, std::string_view value) {
  for (auto& [k, v] : env)
    if (k == name) {
      v = value;
      return;
    }
  env.emplace_back(std::string(name), std::string(value));
}

EnvList rank_env(const WorldPlan& plan, const RankInfo& rank, const EnvOptions& options) {
  DSCPP_CHECK(rank.node_rank >= 0 && rank.node_rank < plan.node_count());
  const HostSlots& host = plan.hosts[static_cast<size_t>(rank.node_rank)];
  std::string local_size = std::to_string(host.slots.size());
  EnvList env = {
      {"RANK", std::to_string(rank.rank)},
      {"LOCAL_RANK", std::to_string(rank.local_rank)},
      {"WORLD_SIZE", std::to_string(plan.world_size())},
      {"LOCAL_SIZE", local_size},
      {"LOCAL_WORLD_SIZE", local_size},  // torchrun's name for LOCAL_SIZE
      {"CROSS_RANK", std::to_string(rank.node_rank)},
      {"GROUP_RANK", std::to_string(rank.node_rank)},  // torchrun's name for CROSS_RANK
      {"CROSS_SIZE", std::to_string(plan.node_count())},
      {"MASTER_ADDR", plan.master_addr},
      {"MASTER_PORT", std::to_string(plan.master_port)},
  };
  if (plan.devices_are_gpus) env.emplace_back("CUDA_VISIBLE_DEVICES", join_ids(host.slots));
  if (options.omp_threads) {
    if (options.cores_per_rank < 1)
      fail("--bind_cores_to_rank: {} cores per rank; expected at least 1", options.cores_per_rank);
    env.emplace_back("OMP_NUM_THREADS", std::to_string(options.cores_per_rank));
  }
  size_t planned = env.size();
  for (const auto& [name, value] : options.exported) {
    auto first_exported = env.begin() + static_cast<std::ptrdiff_t>(planned);
    if (std::any_of(env.begin(), first_exported, [&](const auto& kv) { return kv.first == name; })) continue;
    auto it = std::find_if(first_exported, env.end(), [&](const auto& kv) { return kv.first == name; });
    if (it != env.end())
      it->second = value;
    else
      env.emplace_back(name, value);
  }
  return env;
}

std::string world_info_json(const ResourcePool& pool) {
  std::string out = "{";
  for (size_t i = 0; i < pool.size(); ++i) {
    out += (i ? ", " : "") + python_json_string(pool[i].host) + ": [";
    for (size_t k = 0; k < pool[i].slots.size(); ++k) out += (k ? ", " : "") + std::to_string(pool[i].slots[k]);
    out += "]";
  }
  return out + "}";
}

std::string base64url_encode(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    unsigned chunk = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) chunk |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) chunk |= static_cast<unsigned char>(bytes[i + 2]);
    out += kBase64Url[(chunk >> 18) & 63];
    out += kBase64Url[(chunk >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64Url[(chunk >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64Url[chunk & 63] : '=';
  }
  return out;
}

std::string encode_world_info(const ResourcePool& pool) { return base64url_encode(world_info_json(pool)); }

ResourcePool decode_world_info(std::string_view encoded) {
  std::string text = base64_decode(encoded);
  config::JsonValue root;
  try {
    root = config::parse_json(text);
  } catch (const config::JsonSyntaxError& e) {
    fail(
        "--world_info decodes to text that is not JSON (line {}, column {}: {}); expected an object like "
        "{{\"host\": [0, 1]}}",
        e.loc.line, e.loc.column, e.what());
  }
  if (root.kind != config::JsonValue::Kind::object)
    fail(
        "--world_info decodes to {}; expected an object mapping host names to slot lists, e.g. "
        "{{\"host\": [0, 1]}}",
        config::kind_name(root.kind));
  ResourcePool pool;
  for (const config::JsonMember& m : root.members) {
    if (m.key.empty()) fail("--world_info: found an empty host name; expected a host name as each key");
    if (m.value.kind != config::JsonValue::Kind::array)
      fail("--world_info: host \"{}\" maps to {} ({}); expected a list of slot ids", m.key,
           config::kind_name(m.value.kind), m.value.describe());
    HostSlots host{m.key, {}};
    std::set<int> seen;
    for (const config::JsonValue& item : m.value.items) {
      if (item.kind != config::JsonValue::Kind::integer || item.integer < 0 || item.integer > INT_MAX)
        fail("--world_info: host \"{}\" has the slot {}; expected non-negative integers", m.key, item.describe());
      int slot = static_cast<int>(item.integer);
      if (!seen.insert(slot).second)
        fail("--world_info: host \"{}\" lists slot {} twice; expected distinct slots", m.key, slot);
      host.slots.push_back(slot);
    }
    pool.push_back(std::move(host));
  }
  return pool;
}

}  // namespace dscpp::launcher
