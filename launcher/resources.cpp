// Resource filters with the documented include semantics, slot checks
// against the pool, and the small parsers that feed them.
#include "launcher/resources.h"

#include "core/edit_distance.h"
#include "core/error.h"
#include "launcher/hostfile.h"

#include <algorithm>
#include <charconv>
#include <set>

namespace dscpp::launcher {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    size_t end = s.find(sep, pos);
    parts.push_back(s.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    if (end == std::string_view::npos) return parts;
    pos = end + 1;
  }
}

// A non-negative decimal integer (the whole of `s`), or -1.
int parse_id(std::string_view s) {
  int value = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0) return -1;
  return value;
}

const HostSlots& find_host(const ResourcePool& pool, const NodeSpec& spec, std::string_view flag,
                           std::string_view node_text, std::string_view pool_source) {
  for (const auto& h : pool)
    if (host_name_of(h.host) == spec.host) {
      std::string listed = split_user_host(h.host).user;
      if (!spec.user.empty() && !listed.empty() && listed != spec.user)
        fail(
            "{} \"{}\": found {}@{}, but {} lists that host as '{}'; expected the same user or none (the hostfile's "
            "user@ decides who logs in; --ssh_user overrides both)",
            flag, node_text, spec.user, spec.host, pool_source, h.host);
      return h;
    }
  if (pool.empty())
    fail("{} \"{}\": host '{}' is not in {}, which has no hosts", flag, node_text, spec.host, pool_source);
  const HostSlots* closest = &pool.front();
  for (const auto& h : pool)
    if (edit_distance(host_name_of(h.host), spec.host) < edit_distance(host_name_of(closest->host), spec.host))
      closest = &h;
  std::string names;
  for (size_t i = 0; i < pool.size() && i < 8; ++i) names += (i ? ", " : "") + pool[i].host;
  if (pool.size() > 8) names += fmt::format(", ... ({} more)", pool.size() - 8);
  fail("{} \"{}\": host '{}' is not in {} (did you mean '{}'?); its hosts are: {}", flag, node_text, spec.host,
       pool_source, closest->host, names);
}

void check_slot(const HostSlots& host, int slot, std::string_view flag, std::string_view node_text,
                std::string_view pool_source) {
  if (std::find(host.slots.begin(), host.slots.end(), slot) != host.slots.end()) return;
  std::string has = host.slots.empty() ? "it has no slots" : "it has slots " + format_id_ranges(host.slots);
  fail("{} \"{}\": No slot '{}' on host '{}' ({}); use slot ids that {} lists for it", flag, node_text, slot, host.host,
       has, pool_source);
}

ResourcePool drop_empty(ResourcePool pool) {
  std::erase_if(pool, [](const HostSlots& h) { return h.slots.empty(); });
  return pool;
}

}  // namespace

std::vector<NodeSpec> parse_node_specs(std::string_view spec, std::string_view flag) {
  std::vector<NodeSpec> nodes;
  for (std::string_view raw : split(spec, '@')) {
    std::string_view node = trim(raw);
    if (node.empty())
      fail("{} \"{}\": found an empty host entry; expected NAME[:SLOT[,SLOT...]] between each '@'", flag, spec);
    size_t colon = node.find(':');
    NodeSpec parsed{std::string(trim(node.substr(0, colon))), {}};
    if (parsed.host.empty())
      fail("{} \"{}\": found \"{}\" without a host name; expected NAME[:SLOT,...]", flag, spec, node);
    if (colon == std::string_view::npos) {
      nodes.push_back(std::move(parsed));
      continue;
    }
    std::string_view slots = node.substr(colon + 1);
    if (slots.find(':') != std::string_view::npos)
      fail("{} \"{}\": found \"{}\" with more than one ':'; expected NAME:SLOT,SLOT,... (separate hosts with '@')",
           flag, spec, node);
    for (std::string_view item : split(slots, ',')) {
      int id = parse_id(trim(item));
      if (id < 0)
        fail("{} \"{}\": found slot \"{}\" in \"{}\"; expected a non-negative integer slot id", flag, spec, trim(item),
             node);
      parsed.slots.push_back(id);
    }
    nodes.push_back(std::move(parsed));
  }
  return nodes;
}

std::vector<NodeSpec> join_users(std::vector<NodeSpec> nodes, const ResourcePool& pool) {
  auto in_pool = [&](const std::string& name) {
    return std::any_of(pool.begin(), pool.end(), [&](const HostSlots& h) { return host_name_of(h.host) == name; });
  };
  std::vector<NodeSpec> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].slots.empty() && i + 1 < nodes.size() && !in_pool(nodes[i].host) && in_pool(nodes[i + 1].host)) {
      nodes[i + 1].user = nodes[i].host;
      continue;
    }
    out.push_back(std::move(nodes[i]));
  }
  return out;
}

ResourcePool include_resources(const ResourcePool& pool, std::string_view spec, std::string_view pool_source) {
  // Per pool host: not named, named whole, or the set of named slots (merged over NODEs).
  std::vector<bool> whole(pool.size(), false);
  std::vector<std::set<int>> named(pool.size());
  std::vector<std::string> login(pool.size());  // a USER@ given here for a host the pool lists without one
  for (const NodeSpec& node : join_users(parse_node_specs(spec, "--include"), pool)) {
    const HostSlots& host = find_host(pool, node, "--include", spec, pool_source);
    size_t index = static_cast<size_t>(&host - pool.data());
    if (!node.user.empty() && !login[index].empty() && login[index] != node.user)
      fail("--include \"{}\": found host '{}' as {}@ and as {}@; expected one user per host", spec, node.host,
           login[index], node.user);
    if (!node.user.empty()) login[index] = node.user;
    if (node.slots.empty()) whole[index] = true;
    for (int slot : node.slots) {
      check_slot(host, slot, "--include", spec, pool_source);
      named[index].insert(slot);
    }
  }
  ResourcePool active;
  for (size_t i = 0; i < pool.size(); ++i) {
    std::string entry = login[i].empty() ? pool[i].host : login[i] + "@" + host_name_of(pool[i].host);
    if (whole[i])
      active.push_back({entry, pool[i].slots});
    else if (!named[i].empty())
      active.push_back({entry, {named[i].begin(), named[i].end()}});
  }
  return drop_empty(std::move(active));
}

ResourcePool exclude_resources(const ResourcePool& pool, std::string_view spec, std::string_view pool_source) {
  ResourcePool active = pool;
  for (const NodeSpec& node : join_users(parse_node_specs(spec, "--exclude"), pool)) {
    const HostSlots& host = find_host(pool, node, "--exclude", spec, pool_source);
    std::vector<int>& slots = active[static_cast<size_t>(&host - pool.data())].slots;
    if (node.slots.empty()) slots.clear();
    for (int slot : node.slots) {
      check_slot(host, slot, "--exclude", spec, pool_source);
      std::erase(slots, slot);  // excluding a slot twice is harmless
    }
  }
  return drop_empty(std::move(active));
}

ResourcePool select_resources(const ResourcePool& pool, const ResourceSelection& sel) {
  bool filtered = !sel.include.empty() || !sel.exclude.empty();
  if (!sel.include.empty() && !sel.exclude.empty())
    fail(
        "--include \"{}\" and --exclude \"{}\" were both given; expected one of them (list the wanted slots in "
        "--include, or the unwanted ones in --exclude)",
        sel.include, sel.exclude);
  if (filtered && (sel.num_nodes >= 0 || sel.num_gpus >= 0))
    fail(
        "--num_nodes/--num_gpus cannot be combined with --{}; expected either a host:slot list or counts (e.g. "
        "--include \"w0:0,1@w1:0,1\" instead of --num_nodes 2 --num_gpus 2)",
        sel.include.empty() ? "exclude" : "include");
  ResourcePool active = !sel.include.empty()   ? include_resources(pool, sel.include, sel.pool_source)
                        : !sel.exclude.empty() ? exclude_resources(pool, sel.exclude, sel.pool_source)
                                               : drop_empty(pool);
  if (sel.num_nodes > 0) {
    if (static_cast<size_t>(sel.num_nodes) > active.size())
      fail("--num_nodes {}: {} has only {} host(s) with slots; expected at most {}", sel.num_nodes, sel.pool_source,
           active.size(), active.size());
    active.resize(static_cast<size_t>(sel.num_nodes));
  }
  if (sel.num_gpus > 0) {
    size_t want = static_cast<size_t>(sel.num_gpus);
    for (HostSlots& host : active) {
      if (host.slots.size() >= want) {
        host.slots.resize(want);
      } else if (sel.slots_are_limits) {
        fail("--num_gpus {}: host '{}' has only {} slot(s) ({}) in {}; expected at most {}", sel.num_gpus, host.host,
             host.slots.size(), format_id_ranges(host.slots), sel.pool_source, host.slots.size());
      } else {
        host.slots.clear();
        for (int s = 0; s < sel.num_gpus; ++s) host.slots.push_back(s);
      }
    }
  }
  return active;
}

ResourcePool local_device_pool(std::string_view cuda_visible_devices, int device_count) {
  std::string_view value = trim(cuda_visible_devices);
  HostSlots local{"localhost", {}};
  if (value.empty()) {
    for (int d = 0; d < device_count; ++d) local.slots.push_back(d);
    return {local};
  }
  // CUDA's own meaning of a lone negative id: no device is visible.
  if (value.front() == '-' && value.find(',') == std::string_view::npos && parse_id(value.substr(1)) >= 0)
    return {local};
  for (std::string_view raw : split(value, ',')) {
    std::string_view item = trim(raw);
    if (item.starts_with("GPU-") || item.starts_with("MIG-"))
      fail(
          "CUDA_VISIBLE_DEVICES={}: found the device UUID \"{}\"; expected integer device ids (nvidia-smi -L "
          "lists them), because each rank's CUDA_VISIBLE_DEVICES is set from these ids",
          value, item);
    int id = parse_id(item);
    if (id < 0)
      fail("CUDA_VISIBLE_DEVICES={}: found \"{}\"; expected a comma-separated list of device ids", value, item);
    if (std::find(local.slots.begin(), local.slots.end(), id) != local.slots.end())
      fail("CUDA_VISIBLE_DEVICES={}: device {} is listed twice; expected each device once", value, id);
    if (device_count >= 0 && id >= device_count)
      fail("CUDA_VISIBLE_DEVICES={}: device {} does not exist; this machine has {} device(s){}", value, id,
           device_count, device_count > 0 ? fmt::format(" (ids 0-{})", device_count - 1) : "");
    local.slots.push_back(id);
  }
  return {local};
}

std::vector<int> parse_core_list(std::string_view text) {
  std::vector<int> cores;
  int last = -1;
  if (trim(text).empty()) fail("--bind_core_list is empty; expected cores like \"0-3,8\"");
  for (std::string_view raw : split(text, ',')) {
    std::string_view item = trim(raw);
    size_t dash = item.find('-', 1);
    int first = parse_id(trim(item.substr(0, dash)));
    int end = dash == std::string_view::npos ? first : parse_id(trim(item.substr(dash + 1)));
    if (first < 0 || end < 0)
      fail("--bind_core_list \"{}\": found \"{}\"; expected a core number or a range like 4-7", text, item);
    if (end < first)
      fail("--bind_core_list \"{}\": found the range \"{}\" ending before it starts; expected low-high", text, item);
    if (first <= last)
      fail("--bind_core_list \"{}\": found \"{}\" after core {}; expected ascending, non-overlapping items", text, item,
           last);
    for (int c = first; c <= end; ++c) cores.push_back(c);
    last = end;
  }
  return cores;
}

std::vector<std::vector<int>> split_cores(const std::vector<int>& cores, int local_ranks) {
  if (local_ranks <= 0) fail("cannot split cores among {} local ranks; expected at least one rank", local_ranks);
  size_t per_rank = cores.size() / static_cast<size_t>(local_ranks);
  if (per_rank < 1)
    fail(
        "--bind_cores_to_rank: {} core(s) ({}) for {} ranks on this host; expected at least one core per rank "
        "(give more cores in --bind_core_list or run fewer ranks)",
        cores.size(), format_id_ranges(cores), local_ranks);
  std::vector<std::vector<int>> slices;
  for (size_t k = 0; k < static_cast<size_t>(local_ranks); ++k)
    slices.emplace_back(cores.begin() + static_cast<std::ptrdiff_t>(k * per_rank),
                        cores.begin() + static_cast<std::ptrdiff_t>((k + 1) * per_rank));
  return slices;
}

std::string format_id_ranges(std::vector<int> ids) {
  if (ids.empty()) return "none";
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ids[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace dscpp::launcher
