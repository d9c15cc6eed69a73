// Accelerate's DeepSpeedPlugin rules, on configs/'s JSON tree (which keeps the user's key order
// and reads DeepSpeed's JSON dialect: comments, trailing commas, Infinity).
#include "launcher/accelerate/deepspeed_config.h"

#include "configs/json.h"
#include "core/error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dscpp::launcher::accelerate {
namespace {

using config::JsonMember;
using config::JsonValue;

JsonValue text_value(std::string s) {
  JsonValue v;
  v.kind = JsonValue::Kind::string;
  v.text = std::move(s);
  return v;
}

JsonValue integer_value(long long i) {
  JsonValue v;
  v.kind = JsonValue::Kind::integer;
  v.integer = i;
  v.number = static_cast<double>(i);
  return v;
}

JsonValue number_value(double d) {
  JsonValue v;
  v.kind = JsonValue::Kind::number;
  v.number = d;
  return v;
}

JsonValue bool_value(bool b) {
  JsonValue v;
  v.kind = JsonValue::Kind::boolean;
  v.boolean = b;
  return v;
}

JsonMember entry(std::string key, JsonValue value) {
  JsonMember m;
  m.key = std::move(key);
  m.value = std::move(value);
  return m;
}

JsonValue object(std::vector<JsonMember> members) {
  JsonValue v;
  v.kind = JsonValue::Kind::object;
  v.members = std::move(members);
  return v;
}

// Accelerate's find_config_node: the value at a dotted path, or null when a level is missing.
JsonValue* at(JsonValue& root, std::string_view path) {
  JsonValue* node = &root;
  size_t start = 0;
  while (node) {
    size_t dot = path.find('.', start);
    if (node->kind != JsonValue::Kind::object) return nullptr;
    node = node->find(path.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return node;
    start = dot + 1;
  }
  return nullptr;
}

bool is_auto(const JsonValue* v) {
  return v && v->is_string("auto");
}

// The plugin's settings with Accelerate's defaults (what DeepSpeedPlugin reads from the
// ACCELERATE_* variables its launcher sets), as the DeepSpeed values they stand for.
struct PluginValues {
  JsonValue gradient_accumulation_steps, gradient_clipping, stage, offload_optimizer_device, offload_param_device,
      offload_optimizer_nvme_path, offload_param_nvme_path, save_16bit;
};

std::string lower(std::string s) {
  std::ranges::transform(s, s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

PluginValues plugin_values(const Settings& s) {
  PluginValues p;
  auto gas = s.integer("gradient_accumulation_steps");
  p.gradient_accumulation_steps = gas ? integer_value(*gas) : text_value("auto");
  auto clip = s.number("gradient_clipping");
  p.gradient_clipping = clip ? number_value(*clip) : text_value("auto");
  p.stage = integer_value(s.integer("zero_stage").value_or(2));
  p.offload_optimizer_device = text_value(lower(s.string("offload_optimizer_device").value_or("none")));
  p.offload_param_device = text_value(lower(s.string("offload_param_device").value_or("none")));
  p.offload_optimizer_nvme_path = text_value(s.string("offload_optimizer_nvme_path").value_or("none"));
  p.offload_param_nvme_path = text_value(s.string("offload_param_nvme_path").value_or("none"));
  p.save_16bit = bool_value(s.boolean("zero3_save_16bit_model").value_or(false));
  for (const char* name : {"offload_optimizer_device", "offload_param_device"}) {
    const std::string device = lower(s.string(name).value_or("none"));
    if (device != "none" && device != "cpu" && device != "nvme")
      fail("{}: expected none, cpu or nvme", s.describe(name));
  }
  if (auto stage = s.integer("zero_stage"); stage && (*stage < 0 || *stage > 3))
    fail("{}: expected a ZeRO stage 0, 1, 2 or 3", s.describe("zero_stage"));
  return p;
}

// Accelerate would hand DeepSpeed the directory "none" here (its launcher does not pass the
// NVMe paths on, and the plugin's default is that string); DeepSpeed then swaps into ./none.
void check_nvme(JsonValue& root, const Settings& s) {
  for (const char* which : {"optimizer", "param"}) {
    const JsonValue* device = at(root, fmt::format("zero_optimization.offload_{}.device", which));
    const JsonValue* path = at(root, fmt::format("zero_optimization.offload_{}.nvme_path", which));
    if (device && device->is_string("nvme") && (!path || path->is_null() || path->is_string("none")))
      fail("offload_{0}_device is nvme but no offload_{0}_nvme_path is given ({1}): say where the swap files go", which,
           s.file.empty() ? "pass --offload_" + std::string(which) + "_nvme_path" : s.file);
  }
}

const std::vector<std::string> kPluginSettings = {
    "gradient_accumulation_steps", "gradient_clipping",      "zero_stage",
    "offload_optimizer_device",    "offload_param_device",   "offload_param_nvme_path",
    "offload_optimizer_nvme_path", "zero3_save_16bit_model", "mixed_precision"};

JsonValue read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("deepspeed_config_file {}: cannot open it: {}", path, std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return config::parse_json(buffer.str());
  } catch (const config::JsonSyntaxError& e) {
    fail("{}:{}:{}: {}", path, e.loc.line, e.loc.column, e.what());
  }
}

// DeepSpeedPlugin with a deepspeed_config_file: the file's "auto" values are filled from the
// plugin's settings; everything it states stays.
JsonValue from_json_file(const Settings& s) {
  std::vector<std::string> conflicting;
  std::vector<std::string> fields = s.deepspeed_fields_in_file;
  if (s.mixed_precision_from_file) fields.push_back("mixed_precision");
  for (const std::string& f : fields)
    if (std::ranges::find(kPluginSettings, f) != kPluginSettings.end()) conflicting.push_back(s.describe(f));
  if (!conflicting.empty()) {
    std::string list, names;
    for (const auto& c : conflicting) list += (list.empty() ? "" : ", ") + c;
    for (const auto& n : kPluginSettings) names += (names.empty() ? "" : ", ") + n;
    fail(
        "{}: with a deepspeed_config_file ({}) Accelerate ignores these config file settings: {}; put them in the "
        "DeepSpeed config instead (or give them as launch flags, which fill its \"auto\" values). The config file "
        "has: {}",
        s.file, s.describe("deepspeed_config_file"), names, list);
  }
  const std::string path = *s.string("deepspeed_config_file");
  JsonValue root = read_json_file(path);
  if (root.kind != JsonValue::Kind::object) fail("{}: expected a JSON object", path);
  if (!root.find("gradient_accumulation_steps"))
    root.members.push_back(entry("gradient_accumulation_steps", integer_value(1)));
  if (!root.find("zero_optimization"))
    fail("{}: no zero_optimization section (Accelerate requires one in a deepspeed_config_file)", path);
  const PluginValues p = plugin_values(s);
  const std::pair<const char*, const JsonValue*> fills[] = {
      {"gradient_accumulation_steps", &p.gradient_accumulation_steps},
      {"gradient_clipping", &p.gradient_clipping},
      {"zero_optimization.stage", &p.stage},
      {"zero_optimization.offload_optimizer.device", &p.offload_optimizer_device},
      {"zero_optimization.offload_param.device", &p.offload_param_device},
      {"zero_optimization.offload_param.nvme_path", &p.offload_param_nvme_path},
      {"zero_optimization.offload_optimizer.nvme_path", &p.offload_optimizer_nvme_path},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", &p.save_16bit}};
  for (const auto& [path_in_json, value] : fills)
    if (JsonValue* node = at(root, path_in_json); is_auto(node)) *node = *value;
  return root;
}

// DeepSpeedPlugin without a deepspeed_config_file.
JsonValue from_settings(const Settings& s, bool deepspeed) {
  const PluginValues p = plugin_values(s);
  auto offload = [](const JsonValue& device, const JsonValue& path) {
    return object({entry("device", device), entry("nvme_path", device.is_string("nvme") ? path : JsonValue{})});
  };
  JsonValue zero = object({entry("stage", deepspeed ? p.stage : integer_value(0))});
  if (deepspeed) {
    zero.members.push_back(
        entry("offload_optimizer", offload(p.offload_optimizer_device, p.offload_optimizer_nvme_path)));
    zero.members.push_back(entry("offload_param", offload(p.offload_param_device, p.offload_param_nvme_path)));
    zero.members.push_back(entry("stage3_gather_16bit_weights_on_model_save", p.save_16bit));
  }
  JsonValue root = object(
      {entry("train_batch_size", text_value("auto")), entry("train_micro_batch_size_per_gpu", text_value("auto")),
       entry("gradient_accumulation_steps", p.gradient_accumulation_steps), entry("zero_optimization", zero)});
  // Without DeepSpeed, Accelerate clips only where the program asks; a flag asks here.
  if (deepspeed || s.find("gradient_clipping")) root.members.push_back(entry("gradient_clipping", p.gradient_clipping));
  return root;
}

// Accelerate's set_mixed_precision.
void apply_mixed_precision(JsonValue& root, const Settings& s) {
  const std::string mp = lower(s.string("mixed_precision").value_or("no"));
  if (mp == "fp8")
    fail(
        "{}: dscpp has no FP8 training; use bf16 (what Accelerate's DeepSpeed path computes in around FP8 "
        "matmuls)",
        s.describe("mixed_precision"));
  if (mp != "no" && mp != "fp16" && mp != "bf16") fail("{}: expected no, fp16 or bf16", s.describe("mixed_precision"));
  if (mp == "fp16" && !root.find("fp16"))
    root.members.push_back(
        entry("fp16", object({entry("enabled", bool_value(true)), entry("auto_cast", bool_value(true))})));
  if (mp == "bf16" && !root.find("bf16"))
    root.members.push_back(entry("bf16", object({entry("enabled", bool_value(true))})));
  if (mp != "no") {
    const char* other = mp == "fp16" ? "bf16" : "fp16";
    const JsonValue* enabled = at(root, fmt::format("{}.enabled", other));
    if (enabled && ((enabled->kind == JsonValue::Kind::boolean && enabled->boolean) ||
                    (enabled->kind == JsonValue::Kind::string && lower(enabled->text) == "true")))
      fail("{}: the DeepSpeed config enables {} ({}.enabled: true); Accelerate refuses mixed_precision {} beside it",
           s.describe("mixed_precision"), other, other, mp);
  }
  for (const char* dtype : {"fp16", "bf16"}) {
    if (!root.find(dtype)) root.members.push_back(entry(dtype, object({entry("enabled", bool_value(false))})));
    if (JsonValue* enabled = at(root, fmt::format("{}.enabled", dtype)); is_auto(enabled))
      *enabled = bool_value(mp == dtype);
  }
}

}  // namespace

const std::vector<std::string>& plugin_settings_beside_json() {
  return kPluginSettings;
}

DerivedConfig derive_deepspeed_config(const Settings& s) {
  const std::string type = s.string("distributed_type").value_or("NO");
  const bool deepspeed = type == "DEEPSPEED";
  if (!deepspeed) {
    for (const char* name :
         {"zero_stage", "offload_optimizer_device", "offload_param_device", "offload_optimizer_nvme_path",
          "offload_param_nvme_path", "zero3_save_16bit_model", "deepspeed_config_file"})
      if (s.find(name))
        fail(
            "{} needs DeepSpeed, but the launch is {} (distributed_type {}): set distributed_type: DEEPSPEED or "
            "pass --use_deepspeed",
            s.describe(name), type == "NO" ? "one process without it" : "data parallelism without it",
            s.describe("distributed_type"));
  }
  DerivedConfig d;
  const bool from_file = deepspeed && s.find("deepspeed_config_file");
  JsonValue root = from_file ? from_json_file(s) : from_settings(s, deepspeed);
  check_nvme(root, s);
  apply_mixed_precision(root, s);
  d.json = config::to_json_text(root);
  d.source = from_file ? fmt::format("{} with Accelerate's settings", *s.string("deepspeed_config_file"))
                       : std::string("built from Accelerate's settings");
  return d;
}

}  // namespace dscpp::launcher::accelerate
