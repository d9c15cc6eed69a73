// SLURM environment parsing. The hostlist grammar and its expansion order were checked
// against `scontrol show hostnames` of SLURM 22.05 (the unit test keeps doing so when
// scontrol is installed); the variables against sbatch/srun on tests/testbed/slurm-local.sh
// (captures in tests/data/launcher/slurm_*_env.txt).
#include "launcher/slurm_env.h"

#include "core/error.h"

#include <charconv>
#include <cstdint>
#include <set>

namespace dscpp::launcher {
namespace {

bool is_separator(char c) {
  return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// A decimal number made of digits only (no sign, no spaces), or nullopt.
std::optional<std::uint64_t> parse_digits(std::string_view s) {
  std::uint64_t value = 0;
  if (s.empty() || s.size() > 18) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<std::string> lookup(const Environment& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// The values of one bracket, formatted: "001-003,010" -> 001 002 003 010.
std::vector<std::string> expand_bracket(std::string_view body, std::string_view expr, std::string_view source) {
  std::vector<std::string> values;
  for (size_t pos = 0; pos <= body.size();) {
    size_t end = std::min(body.find(',', pos), body.size());
    std::string_view item = body.substr(pos, end - pos);
    pos = end + 1;
    size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    auto lo = parse_digits(lo_text);
    auto hi = dash == std::string_view::npos ? lo : parse_digits(item.substr(dash + 1));
    if (!lo || !hi)
      fail("{} \"{}\": found the range \"{}\"; expected N or N-M with decimal numbers, e.g. node[01-04,07]", source,
           expr, item);
    if (*hi < *lo)
      fail("{} \"{}\": found the range \"{}\" ending before it starts; expected N-M with N <= M", source, expr, item);
    if (*hi - *lo >= kMaxHostlistHosts)
      fail("{} \"{}\": the range \"{}\" has more than {} hosts", source, expr, item, kMaxHostlistHosts);
    for (std::uint64_t v = *lo; v <= *hi; ++v) values.push_back(fmt::format("{:0{}}", v, lo_text.size()));
  }
  return values;
}

// One item without top-level separators: "rack[1-2]-node[01-02]".
void expand_item(std::string_view item, std::string_view expr, std::string_view source, std::vector<std::string>& out) {
  std::vector<std::string_view> texts;  // text before each bracket, then the tail
  std::vector<std::vector<std::string>> brackets;
  size_t pos = 0;
  for (size_t open; (open = item.find('[', pos)) != std::string_view::npos;) {
    size_t close = item.find(']', open);  // balanced: checked by the caller
    texts.push_back(item.substr(pos, open - pos));
    brackets.push_back(expand_bracket(item.substr(open + 1, close - open - 1), expr, source));
    pos = close + 1;
  }
  std::string_view tail = item.substr(pos);
  if (brackets.empty()) {
    out.emplace_back(item);
    return;
  }
  if (!tail.empty())
    fail(
        "{} \"{}\": found \"{}\" after the last ']' in \"{}\"; expected a range to end the host name, as SLURM "
        "requires",
        source, expr, tail, item);
  size_t total = 1;
  for (const auto& b : brackets) {
    total *= b.size();
    if (total + out.size() > kMaxHostlistHosts)
      fail("{} \"{}\": expands to more than {} hosts", source, expr, kMaxHostlistHosts);
  }
  // SLURM's order: the last bracket varies fastest; the others like a little-endian counter.
  const auto& last = brackets.back();
  std::vector<size_t> index(brackets.size() - 1, 0);
  while (true) {
    std::string prefix;
    for (size_t b = 0; b < index.size(); ++b) prefix += std::string(texts[b]) + brackets[b][index[b]];
    prefix += texts.back();
    for (const auto& v : last) out.push_back(prefix + v);
    size_t b = 0;
    while (b < index.size() && ++index[b] == brackets[b].size()) index[b++] = 0;
    if (b == index.size()) break;
  }
}

// `text` is `value` or one item of it.
int positive_count(std::string_view text, const char* var, std::string_view value, std::string_view expected) {
  auto v = parse_digits(text);
  if (!v || *v > 1'000'000) fail("{}={}: found \"{}\"; expected {}", var, value, text, expected);
  return static_cast<int>(*v);
}

// Number of GPUs per node from the first GPU variable that is present and non-zero.
std::optional<std::pair<int, std::string>> gpus_per_node(const Environment& env) {
  if (auto v = lookup(env, "SLURM_GPUS_ON_NODE")) {
    int n = positive_count(*v, "SLURM_GPUS_ON_NODE", *v, "a GPU count");
    if (n > 0) return std::pair{n, "SLURM_GPUS_ON_NODE=" + *v};
  }
  for (const char* var : {"SLURM_JOB_GPUS", "SLURM_STEP_GPUS"}) {
    if (auto v = lookup(env, var)) {
      int n = 0;  // "0,1,2,3"; ranges "0-3" are counted too
      for (size_t pos = 0; pos <= v->size();) {
        size_t end = std::min(v->find(',', pos), v->size());
        std::string_view item = std::string_view(*v).substr(pos, end - pos);
        pos = end + 1;
        size_t dash = item.find('-');
        int first = positive_count(item.substr(0, dash), var, *v, "a comma-separated list of GPU ids");
        int last = dash == std::string_view::npos
                       ? first
                       : positive_count(item.substr(dash + 1), var, *v, "a comma-separated list of GPU ids");
        if (last < first) fail("{}={}: found the range \"{}\"; expected low-high", var, *v, item);
        n += last - first + 1;
      }
      return std::pair{n, std::string(var) + "=" + *v};
    }
  }
  if (auto v = lookup(env, "SLURM_GPUS_PER_NODE")) {
    int n = 0;  // "[type:]N[,[type:]N...]": the counts add up
    for (size_t pos = 0; pos <= v->size();) {
      size_t end = std::min(v->find(',', pos), v->size());
      std::string_view item = std::string_view(*v).substr(pos, end - pos);
      pos = end + 1;
      std::string_view count = item.substr(item.rfind(':') + 1);  // no ':' => npos + 1 = 0, the whole item
      n += positive_count(count, "SLURM_GPUS_PER_NODE", *v, "[type:]count, e.g. a100:4");
    }
    if (n > 0) return std::pair{n, "SLURM_GPUS_PER_NODE=" + *v};
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr, std::string_view source) {
  std::vector<std::string> hosts;
  size_t begin = 0;
  bool in_bracket = false;
  for (size_t i = 0; i <= expr.size(); ++i) {
    char c = i < expr.size() ? expr[i] : ',';
    if (c == '[') {
      if (in_bracket) fail("{} \"{}\": found '[' inside a range at offset {}; expected ']' first", source, expr, i);
      in_bracket = true;
    } else if (c == ']') {
      if (!in_bracket) fail("{} \"{}\": found ']' without '[' at offset {}", source, expr, i);
      in_bracket = false;
    } else if (in_bracket && i == expr.size()) {
      fail("{} \"{}\": a '[' is never closed; expected ']'", source, expr);
    } else if (!in_bracket && is_separator(c)) {
      if (i > begin) expand_item(expr.substr(begin, i - begin), expr, source, hosts);
      begin = i + 1;
    }
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(std::string_view value, std::string_view source) {
  std::vector<int> counts;
  for (size_t pos = 0; pos <= value.size();) {
    size_t end = std::min(value.find(',', pos), value.size());
    std::string_view item = value.substr(pos, end - pos);
    pos = end + 1;
    size_t paren = item.find('(');
    auto count = parse_digits(item.substr(0, paren));
    std::optional<std::uint64_t> repeat = 1;
    if (paren != std::string_view::npos)
      repeat = item.substr(paren).starts_with("(x") && item.ends_with(")")
                   ? parse_digits(item.substr(paren + 2, item.size() - paren - 3))
                   : std::nullopt;
    if (!count || !repeat || *count > 1'000'000 || *repeat == 0)
      fail("{}={}: found \"{}\"; expected N or N(xM) items separated by commas, e.g. 2(x3),1", source, value, item);
    if (counts.size() + *repeat > kMaxHostlistHosts)
      fail("{}={}: describes more than {} nodes", source, value, kMaxHostlistHosts);
    counts.insert(counts.end(), static_cast<size_t>(*repeat), static_cast<int>(*count));
  }
  return counts;
}

std::optional<SlurmAllocation> slurm_allocation(const Environment& env) {
  const char* nodes_var = "SLURM_JOB_NODELIST";
  auto nodelist = lookup(env, nodes_var);
  if (!nodelist) nodelist = lookup(env, nodes_var = "SLURM_NODELIST");
  if (!nodelist) return std::nullopt;

  SlurmAllocation alloc;
  alloc.nodes_from = std::string(nodes_var) + "=" + *nodelist;
  std::vector<std::string> hosts = expand_hostlist(*nodelist, nodes_var);
  if (hosts.empty()) fail("{}: names no node; expected a hostlist such as node[1-4]", alloc.nodes_from);
  std::set<std::string> seen;
  for (const auto& h : hosts)
    if (!seen.insert(h).second) fail("{}: names node '{}' twice; expected each node once", alloc.nodes_from, h);

  std::vector<int> slots;
  if (auto gpus = gpus_per_node(env)) {
    slots.assign(hosts.size(), gpus->first);
    alloc.devices_are_gpus = true;
    alloc.slots_from = gpus->second;
  } else if (auto v = lookup(env, "SLURM_TASKS_PER_NODE")) {
    slots = expand_tasks_per_node(*v, "SLURM_TASKS_PER_NODE");
    alloc.slots_from = "SLURM_TASKS_PER_NODE=" + *v;
  } else if (auto n = lookup(env, "SLURM_NTASKS_PER_NODE")) {
    slots.assign(hosts.size(), positive_count(*n, "SLURM_NTASKS_PER_NODE", *n, "a task count"));
    alloc.slots_from = "SLURM_NTASKS_PER_NODE=" + *n;
  } else if (auto c = lookup(env, "SLURM_JOB_CPUS_PER_NODE")) {
    slots = expand_tasks_per_node(*c, "SLURM_JOB_CPUS_PER_NODE");
    alloc.slots_from = "SLURM_JOB_CPUS_PER_NODE=" + *c;
  } else {
    fail(
        "{} is set but no per-node count is: expected SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, "
        "SLURM_JOB_CPUS_PER_NODE or a SLURM GPU variable (is this really inside sbatch/salloc?)",
        alloc.nodes_from);
  }
  if (slots.size() != hosts.size())
    fail("{} describes {} node(s) but {} names {}; expected one count per node", alloc.slots_from, slots.size(),
         nodes_var, hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    HostSlots h{hosts[i], {}};
    for (int s = 0; s < slots[i]; ++s) h.slots.push_back(s);
    alloc.pool.push_back(std::move(h));
  }
  return alloc;
}

std::optional<std::string> launched_task_reason(const Environment& env) {
  if (auto v = lookup(env, "RANK"))
    return fmt::format("RANK={} is set: a launcher (dscpp, deepspeed, torchrun) started this process as a rank", *v);
  auto step = lookup(env, "SLURM_STEP_ID");
  if (!step) step = lookup(env, "SLURM_STEPID");
  if (auto v = lookup(env, "SLURM_PROCID"); v && step) {
    auto tasks = lookup(env, "SLURM_STEP_NUM_TASKS");
    if (!tasks) tasks = lookup(env, "SLURM_NTASKS");
    if (!tasks || *tasks != "1")
      return fmt::format(
          "SLURM_PROCID={} is set inside job step {}.{} of {} tasks: srun started this process as one "
          "of its tasks",
          *v, lookup(env, "SLURM_JOB_ID").value_or("?"), *step, tasks.value_or("several"));
  }
  if (auto v = lookup(env, "OMPI_COMM_WORLD_RANK"))
    return fmt::format("OMPI_COMM_WORLD_RANK={} is set: mpirun (OpenMPI) started this process as a rank", *v);
  for (const char* var : {"PMI_RANK", "PMIX_RANK"})
    if (auto v = lookup(env, var))
      return fmt::format(
          "{}={} is set: an MPI/PMI launcher (mpirun, mpiexec, srun --mpi) started this process as a rank", var, *v);
  return std::nullopt;
}

}  // namespace dscpp::launcher
