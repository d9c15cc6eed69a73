// Reading Accelerate's config file with yaml-cpp, typing its scalars as PyYAML (YAML 1.1, which
// Accelerate loads with) would, and merging it with the launch flags.
#include "launcher/accelerate/settings.h"

#include "configs/load.h"
#include "core/error.h"

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

namespace dscpp::launcher::accelerate {
namespace {

enum class Kind { string, integer, number, boolean, id_list, section, unused };

struct Key {
  std::string_view name;
  Kind kind;
};

// The top level of ClusterConfig (accelerate/commands/config/config_args.py). `unused`: valid for
// Accelerate, meaningless to dscpp (said once, not an error).
constexpr Key kTopKeys[] = {
    {"compute_environment", Kind::string},
    {"distributed_type", Kind::string},
    {"mixed_precision", Kind::string},
    {"use_cpu", Kind::boolean},
    {"num_processes", Kind::integer},
    {"machine_rank", Kind::integer},
    {"num_machines", Kind::integer},
    {"gpu_ids", Kind::id_list},
    {"main_process_ip", Kind::string},
    {"main_process_port", Kind::integer},
    {"rdzv_backend", Kind::string},
    {"same_network", Kind::boolean},
    {"enable_cpu_affinity", Kind::boolean},
    {"deepspeed_config", Kind::section},
    {"num_cpu_threads_per_process", Kind::integer},  // in Accelerate a launch flag only
    {"fp16", Kind::boolean},                         // the old spelling of mixed_precision: fp16
    {"debug", Kind::unused},
    {"main_training_function", Kind::unused},
    {"downcast_bf16", Kind::unused},
    {"fsdp_config", Kind::unused},
    {"megatron_lm_config", Kind::unused},
    {"fp8_config", Kind::unused},
    {"parallelism_config", Kind::unused},
    {"mpirun_config", Kind::unused},
    {"dynamo_config", Kind::unused},
    {"dynamo_backend", Kind::unused},
    {"ipex_config", Kind::unused},
    {"tpu_name", Kind::unused},
    {"tpu_zone", Kind::unused},
    {"tpu_use_cluster", Kind::unused},
    {"tpu_use_sudo", Kind::unused},
    {"command_file", Kind::unused},
    {"commands", Kind::unused},
    {"tpu_vm", Kind::unused},
    {"tpu_env", Kind::unused},
    {"use_xpu", Kind::unused},
};

// deepspeed_config's keys (what `accelerate config` writes there).
constexpr Key kDeepSpeedKeys[] = {
    {"deepspeed_config_file", Kind::string},
    {"zero_stage", Kind::integer},
    {"offload_optimizer_device", Kind::string},
    {"offload_param_device", Kind::string},
    {"offload_optimizer_nvme_path", Kind::string},
    {"offload_param_nvme_path", Kind::string},
    {"gradient_accumulation_steps", Kind::integer},
    {"gradient_clipping", Kind::number},
    {"zero3_init_flag", Kind::boolean},
    {"zero3_save_16bit_model", Kind::boolean},
    {"deepspeed_hostfile", Kind::string},
    {"deepspeed_inclusion_filter", Kind::string},
    {"deepspeed_exclusion_filter", Kind::string},
    {"deepspeed_multinode_launcher", Kind::string},
    {"deepspeed_moe_layer_cls_names", Kind::unused},
};

const Key* find_key(std::string_view name) {
  for (const Key& k : kTopKeys)
    if (k.name == name) return &k;
  for (const Key& k : kDeepSpeedKeys)
    if (k.name == name) return &k;
  return nullptr;
}

template <size_t N>
std::vector<std::string> names_of(const Key (&keys)[N]) {
  std::vector<std::string> out;
  for (const Key& k : keys) out.emplace_back(k.name);
  return out;
}

// PyYAML's implicit types for plain scalars (YAML 1.1): what `yaml.safe_load` turns them into.
enum class Plain { null, boolean, integer, number, string };

Plain classify(const std::string& s) {
  static const std::regex null_re("~|null|Null|NULL|");
  static const std::regex bool_re("yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");
  static const std::regex int_re("[-+]?(0|[1-9][0-9_]*)");
  static const std::regex float_re(
      "[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
  if (std::regex_match(s, null_re)) return Plain::null;
  if (std::regex_match(s, bool_re)) return Plain::boolean;
  if (std::regex_match(s, int_re)) return Plain::integer;
  if (std::regex_match(s, float_re) && s != "." && s != "+." && s != "-.") return Plain::number;
  return Plain::string;
}

bool yaml_true(const std::string& s) {
  return s == "yes" || s == "Yes" || s == "YES" || s == "true" || s == "True" || s == "TRUE" || s == "on" ||
         s == "On" || s == "ON";
}

std::string without_underscores(std::string s) {
  std::erase(s, '_');
  return s;
}

// A value of `kind` from its text; `plain` says how YAML typed it (quoted scalars are strings).
// Throws a bare message; the caller adds where.
Value typed(std::string_view name, Kind kind, const std::string& text, Plain plain) {
  Value v;
  v.text = text;
  auto expected = [&](std::string_view what) {
    throw Error(fmt::format("{}: expected {}, found {}", name, what, plain == Plain::string ? "'" + text + "'" : text));
  };
  switch (kind) {
    case Kind::integer:
      if (plain != Plain::integer) expected("an integer");
      v.type = Value::Type::integer;
      v.integer = std::stoll(without_underscores(text));
      v.number = static_cast<double>(v.integer);
      break;
    case Kind::number:
      if (plain != Plain::integer && plain != Plain::number) expected("a number");
      v.type = Value::Type::number;
      v.number = std::strtod(without_underscores(text).c_str(), nullptr);
      break;
    case Kind::boolean:
      if (plain != Plain::boolean) expected("true or false");
      v.type = Value::Type::boolean;
      v.boolean = yaml_true(text);
      break;
    case Kind::id_list:  // "all", "0,1", or one id (which YAML reads as an integer)
    case Kind::string:
      v.type = Value::Type::string;
      if (name == "mixed_precision" && plain == Plain::boolean) {
        // Accelerate reads `mixed_precision: false` (older files) as "no".
        if (yaml_true(text)) expected("no, fp16, bf16 or fp8");
        v.text = "no";
      }
      break;
    case Kind::section:
    case Kind::unused:
      break;
  }
  return v;
}

// What `accelerate config` writes for a feature not chosen (false, 'no', null, {}, [], the
// default "main"): not worth a line in the log.
bool left_at_default(const YAML::Node& value) {
  if (value.IsNull() || ((value.IsMap() || value.IsSequence()) && value.size() == 0)) return true;
  if (!value.IsScalar()) return false;
  const std::string& s = value.Scalar();
  return s == "main" || s == "no" || s == "NO" || (classify(s) == Plain::boolean && !yaml_true(s));
}

std::string file_line(const std::string& path, const YAML::Mark& mark) {
  return fmt::format("{}:{}", path, mark.line + 1);
}

// YAML allows no tabs in indentation; yaml-cpp's message for one ("illegal map value") does not say so.
void refuse_tabs(const std::string& path, const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    size_t lead = line.find_first_not_of(" \t");
    if (lead == std::string::npos || line[lead] == '#') continue;
    if (line.find('\t') < lead) fail("{}:{}: a tab in the indentation: YAML indents with spaces only", path, n);
  }
}

class FileReader {
 public:
  explicit FileReader(const std::string& path) : path_(path) {}

  Settings read() {
    std::ifstream in(path_);
    if (!in) fail("Accelerate config {}: cannot open it: {}", path_, std::strerror(errno));
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    refuse_tabs(path_, text);
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail("{}:{}:{}: not valid YAML: {}", path_, e.mark.line + 1, e.mark.column + 1, e.msg);
    }
    settings_.file = path_;
    if (!root.IsMap())
      fail("{}: expected a mapping of Accelerate settings (key: value lines), found {}", path_,
           root.IsNull() ? "an empty document" : "a single value or a list");
    read_map(root, kTopKeys, "");
    if (!settings_.values.contains("distributed_type"))
      fail("{}: no distributed_type (Accelerate requires one: DEEPSPEED, MULTI_CPU, MULTI_GPU or NO)", path_);
    return settings_;
  }

 private:
  template <size_t N>
  void read_map(const YAML::Node& map, const Key (&keys)[N], std::string_view section) {
    std::map<std::string, int> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key_node = it->first, value = it->second;  // copies: `it->` hands out a temporary
      const std::string key = key_node.Scalar();
      const std::string where = file_line(path_, key_node.Mark());
      if (auto [first, fresh] = seen.emplace(key, key_node.Mark().line + 1); !fresh)
        fail("{}: duplicate key '{}' (first at line {})", where, key, first->second);
      const Key* spec = nullptr;
      for (const Key& k : keys)
        if (k.name == key && k.name != "num_cpu_threads_per_process") spec = &k;  // that one is a flag only
      if (!spec) {
        if (key == "num_cpu_threads_per_process")
          fail(
              "{}: num_cpu_threads_per_process is a launch flag only (--num_cpu_threads_per_process), as in "
              "Accelerate",
              where);
        std::string close = config::closest_match(key, names_of(keys));
        fail("{}: unknown Accelerate setting '{}'{}{}", where, key,
             section.empty() ? "" : fmt::format(" in {}", section),
             close.empty() ? "" : fmt::format("; did you mean '{}'?", close));
      }
      if (spec->kind == Kind::unused) {
        if (!left_at_default(value)) settings_.not_applicable.push_back(fmt::format("{} ({})", key, where));
        continue;
      }
      if (spec->kind == Kind::section) {
        if (value.IsNull()) continue;
        if (!value.IsMap())
          fail("{}: {}: expected a mapping, found a {}", where, key, value.IsSequence() ? "list" : "value");
        read_map(value, kDeepSpeedKeys, key);
        continue;
      }
      if (section == "deepspeed_config") settings_.deepspeed_fields_in_file.push_back(key);
      if (value.IsNull()) continue;  // Accelerate's `key: null` is the key left out
      if (!value.IsScalar())
        fail("{}: {}: expected a single value, found a {}", where, key, value.IsSequence() ? "list" : "mapping");
      const bool quoted = value.Tag() == "!";
      const Plain plain = quoted ? Plain::string : classify(value.Scalar());
      if (plain == Plain::null) continue;
      try {
        Value v = typed(key, spec->kind, value.Scalar(), plain);
        v.where = where;
        if (key == "fp16") {  // the old spelling: fp16: true is mixed_precision: fp16
          if (v.boolean && !settings_.values.contains("mixed_precision"))
            settings_.values["mixed_precision"] = Value{Value::Type::string, "fp16", 0, 0, false, where};
          continue;
        }
        settings_.values[key] = v;
      } catch (const Error& e) {
        fail("{}: {}", where, e.what());
      }
    }
  }

  std::string path_;
  Settings settings_;
};

}  // namespace

const Value* Settings::find(std::string_view name) const {
  auto it = values.find(std::string(name));
  return it == values.end() ? nullptr : &it->second;
}

std::optional<long long> Settings::integer(std::string_view name) const {
  const Value* v = find(name);
  return v ? std::optional(v->integer) : std::nullopt;
}

std::optional<double> Settings::number(std::string_view name) const {
  const Value* v = find(name);
  return v ? std::optional(v->number) : std::nullopt;
}

std::optional<bool> Settings::boolean(std::string_view name) const {
  const Value* v = find(name);
  return v ? std::optional(v->boolean) : std::nullopt;
}

std::optional<std::string> Settings::string(std::string_view name) const {
  const Value* v = find(name);
  return v ? std::optional(v->text) : std::nullopt;
}

std::string Settings::describe(std::string_view name) const {
  const Value* v = find(name);
  if (!v) return std::string(name);
  if (v->where.starts_with("--")) return fmt::format("{} {}", v->where, v->text);
  return fmt::format("{}: {} ({})", name, v->text, v->where);
}

Settings read_config_file(const std::string& path) {
  return FileReader(path).read();
}

namespace {
// Accelerate's str_to_bool, which its --zero3_* flags go through.
std::optional<bool> flag_bool(std::string text) {
  std::ranges::transform(text, text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* t : {"y", "yes", "t", "true", "on", "1"})
    if (text == t) return true;
  for (const char* f : {"n", "no", "f", "false", "off", "0"})
    if (text == f) return false;
  return std::nullopt;
}
}  // namespace

Settings settings_from_flags(const std::map<std::string, std::string>& flags) {
  Settings s;
  for (const auto& [flag, flag_text] : flags) {
    // The switches that stand for file settings.
    std::string name = flag, text = flag_text;
    if (flag == "use_deepspeed" || flag == "multi_gpu") {
      name = "distributed_type";
      text = flag == "use_deepspeed" ? "DEEPSPEED" : "MULTI_GPU";
    } else if (flag == "cpu") {
      name = "use_cpu";
    }
    const Key* key = find_key(name);
    if (!key) fail("--{}: not an Accelerate setting", name);
    if (s.values.contains(name)) fail("--{} and {} both set {}", flag, s.values[name].where, name);
    Value v;
    if (key->kind == Kind::boolean) {
      const std::optional<bool> b = flag_bool(text);
      if (!b) fail("--{} {}: expected true or false", flag, text);
      v = Value{Value::Type::boolean, *b ? "true" : "false", 0, 0, *b, ""};
    } else {
      try {
        v = typed(name, key->kind, text, classify(text));
      } catch (const Error& e) {
        fail("--{}", e.what());
      }
    }
    v.where = "--" + flag;
    s.values[name] = v;
  }
  return s;
}

Settings merge(const Settings& file, const Settings& flags) {
  Settings out = file;
  for (const auto& [name, v] : flags.values) out.values[name] = v;
  out.mixed_precision_from_file = !flags.values.contains("mixed_precision") && file.values.contains("mixed_precision");
  return out;
}

std::string default_config_path(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  std::string home = get("HF_HOME");
  if (home.empty()) {
    std::string cache = get("XDG_CACHE_HOME");
    if (cache.empty()) cache = get("HOME") + "/.cache";
    home = cache + "/huggingface";
  }
  return home + "/accelerate/default_config.yaml";
}

const std::vector<FlagSpec>& flag_specs() {
  static const std::vector<FlagSpec> specs = {
      {"num_processes", "ranks in all (over every machine, as Accelerate counts)"},
      {"num_machines", "machines the job spans"},
      {"machine_rank", "this machine's index (the `standard` multi-node launcher: each machine starts its own ranks)"},
      {"main_process_ip", "rank 0's address (--master_addr)"},
      {"main_process_port", "rank 0's port (--master_port; 0 on one machine = any free one)"},
      {"mixed_precision", "no, fp16 or bf16: fills fp16/bf16 in the DeepSpeed config"},
      {"use_deepspeed", "run with DeepSpeed (distributed_type DEEPSPEED)", false},
      {"cpu", "CPU ranks, even where GPUs are present (use_cpu)", false},
      {"multi_gpu", "data parallelism without ZeRO (distributed_type MULTI_GPU)", false},
      {"gpu_ids", "the GPUs of this machine to use: all, or ids like 0,1"},
      {"num_cpu_threads_per_process", "CPU threads of each rank (OMP_NUM_THREADS, dscpp-runtime's --threads)"},
      {"rdzv_backend", "static or c10d (accepted: dscpp's ranks meet at rank 0's store)"},
      {"same_network", "machines share a network (accepted; dscpp's rendezvous is always rank 0's address)", false},
      {"zero_stage", "ZeRO stage 0-3 (zero_optimization.stage; Accelerate's default 2)"},
      {"offload_optimizer_device", "none, cpu or nvme (zero_optimization.offload_optimizer.device)"},
      {"offload_param_device", "none, cpu or nvme (zero_optimization.offload_param.device)"},
      {"offload_optimizer_nvme_path", "directory of the optimizer's NVMe swap files"},
      {"offload_param_nvme_path", "directory of the parameters' NVMe swap files"},
      {"gradient_accumulation_steps", "micro-batches per optimizer step"},
      {"gradient_clipping", "gradient norm clipping value"},
      {"zero3_init_flag", "true/false: stage 3 creates parameters partitioned (dscpp always does)"},
      {"zero3_save_16bit_model", "true/false: each save also writes the whole model in 16 bits"},
      {"deepspeed_config_file", "a DeepSpeed JSON config; Accelerate's settings fill its \"auto\" values"},
      {"deepspeed_hostfile", "the hostfile of a multi-machine job"},
      {"deepspeed_inclusion_filter", "DeepSpeed's --include"},
      {"deepspeed_exclusion_filter", "DeepSpeed's --exclude"},
      {"deepspeed_multinode_launcher", "pdsh (ssh), standard or nossh (each machine starts its own), openmpi, slurm"},
  };
  return specs;
}

}  // namespace dscpp::launcher::accelerate
