#include "core/edit_distance.h"
#include "lora_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <vector>

namespace dscpp::models {

using layers::fail;
using layers::LoraSpec;

namespace {

// Each key of --lora SPEC under its names (PEFT's LoraConfig field second).
const std::map<std::string, std::string> kKeys = {
    {"r", "r"},
    {"alpha", "alpha"},
    {"lora_alpha", "alpha"},
    {"dropout", "dropout"},
    {"lora_dropout", "dropout"},
    {"target", "target"},
    {"target_modules", "target"},
    {"target_regex", "target_regex"},
    {"rslora", "rslora"},
    {"use_rslora", "rslora"},
};

std::string closest_key(const std::string& word) {
  std::string best;
  size_t distance = SIZE_MAX;
  for (const auto& [name, key] : kKeys)
    if (const size_t d = edit_distance(word, name); d < distance) distance = d, best = name;
  return best;
}

[[noreturn]] void bad_spec(const std::string& what) {
  fail(DSCPP_E_INVALID_ARGUMENT, "--lora: " + what +
                                     " (SPEC is key=value items separated by commas, e.g. "
                                     "r=16,alpha=32,target=q_proj,v_proj; keys r, alpha, dropout, target, "
                                     "target_regex, rslora)");
}

double number_of(const std::string& key, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(x))
    bad_spec(key + " wants a number, found \"" + value + "\"");
  return x;
}

// PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the model types dscpp builds.
std::vector<std::string> default_targets(const std::string& model_type) {
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") return {"q_proj", "v_proj"};
  if (model_type == "gpt2") return {"c_attn"};
  if (model_type == "t5" || model_type == "mt5") return {"q", "v"};
  return {};
}

}  // namespace

LoraSpec parse_lora_spec(const std::string& text) {
  LoraSpec spec;
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::string previous;  // the key the last item set
  std::map<std::string, bool> given;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const auto known = kKeys.find(name);
    // A regular expression may hold commas and '=': what follows target_regex is part of it unless
    // it starts another key.
    if (previous == "target_regex" && known == kKeys.end()) {
      spec.target_regex += "," + item;
      continue;
    }
    if (item.empty()) bad_spec("an empty item in \"" + text + "\"");
    if (known == kKeys.end()) {
      if (eq == std::string::npos && previous == "target") {
        spec.targets.push_back(item);
        continue;
      }
      bad_spec("unknown key \"" + name + "\" (the closest is " + closest_key(name) + ")");
    }
    const std::string& key = known->second;
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (given[key]) bad_spec(key + " is given twice");
    given[key] = true;
    previous = key;
    if (key == "rslora") {
      if (eq == std::string::npos || value == "true" || value == "True")
        spec.rslora = true;
      else if (value == "false" || value == "False")
        spec.rslora = false;
      else
        bad_spec("rslora is a bare flag or rslora=true/false, found \"" + value + "\"");
      continue;
    }
    if (value.empty()) bad_spec(name + " needs a value: " + name + "=…, found \"" + item + "\"");
    if (key == "r") {
      const double r = number_of("r", value);
      if (r != std::floor(r) || r < 1 || r > 1e9)
        bad_spec("r must be a positive integer rank, found \"" + value + "\"");
      spec.r = static_cast<int64_t>(r);
    } else if (key == "alpha") {
      spec.alpha = number_of(name, value);
    } else if (key == "dropout") {
      spec.dropout = number_of(name, value);
      if (!(spec.dropout >= 0 && static_cast<float>(spec.dropout) < 1.0f))
        bad_spec(name + "=" + value + ": the dropout probability must be in [0, 1)");
    } else if (key == "target") {
      spec.targets.push_back(value);
    } else {
      spec.regex = true;
      spec.target_regex = value;
    }
  }
  if (given["target"] && given["target_regex"])
    bad_spec("target and target_regex are PEFT's one target_modules (a list or a regular expression): give one");
  return spec;
}

LoraSpec read_adapter_config(const std::string& path) {
  const HfConfig c(path);
  LoraSpec spec;
  if (c.string("peft_type", "") != "LORA") c.bad("peft_type", "\"LORA\" (dscpp runs LoRA adapters only)");
  if (c.string("bias", "none") != "none") c.bad("bias", "\"none\" (LoRA with trained biases is not implemented)");
  spec.r = c.integer("r");
  if (spec.r < 1) c.bad("r", "a positive rank");
  spec.alpha = c.number("lora_alpha", 8);
  spec.dropout = c.number("lora_dropout", 0);
  if (!(spec.dropout >= 0 && static_cast<float>(spec.dropout) < 1.0f))
    c.bad("lora_dropout", "a dropout probability in [0, 1)");
  spec.rslora = c.boolean("use_rslora", false);
  c.boolean("fan_in_fan_out", false);  // follows the model's layout; only merging would read it
  if (c.boolean("use_dora", false)) c.bad("use_dora", "false (DoRA is not implemented)");
  const nlohmann::json& j = c.json();
  const auto targets = j.find("target_modules");
  if (targets != j.end() && targets->is_string()) {
    spec.regex = true;
    spec.target_regex = targets->get<std::string>();
  } else if (targets != j.end() && targets->is_array() && !targets->empty() &&
             std::all_of(targets->begin(), targets->end(), [](const nlohmann::json& t) { return t.is_string(); })) {
    for (const auto& t : *targets) spec.targets.push_back(t.get<std::string>());
  } else {
    c.bad("target_modules", "a list of module names or a regular expression");
  }
  // Settings that would change the model and that dscpp does not implement.
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (c.has(key) && !(j[key].is_object() && j[key].empty()))
      c.bad(key, "{} (per-module ranks and alphas are not implemented)");
  for (const char* key : {"layers_to_transform", "modules_to_save", "layer_replication"})
    if (c.has(key) && !(j[key].is_array() && j[key].empty())) c.bad(key, "null (not implemented with LoRA)");
  return spec;
}

std::string adapter_config_json(const LoraSpec& spec, bool fan_in_fan_out, const std::string& task_type,
                                const std::string& base_model) {
  nlohmann::json j;
  j["alpha_pattern"] = nlohmann::json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_model;  // "" as PEFT writes it for a model of no directory
  j["bias"] = "none";
  j["fan_in_fan_out"] = fan_in_fan_out;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = nlohmann::json::object();
  // LoraConfig's lora_alpha is an int; a fractional one is kept as it is.
  if (spec.alpha == std::floor(spec.alpha) && std::fabs(spec.alpha) < 1e15)
    j["lora_alpha"] = static_cast<int64_t>(spec.alpha);
  else
    j["lora_alpha"] = spec.alpha;
  j["lora_dropout"] = spec.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = spec.r;
  j["rank_pattern"] = nlohmann::json::object();
  j["revision"] = nullptr;
  if (spec.regex) {
    j["target_modules"] = spec.target_regex;
  } else {
    std::vector<std::string> targets = spec.targets;  // PEFT keeps a set
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    j["target_modules"] = targets;
  }
  j["task_type"] = task_type;
  j["use_dora"] = false;
  j["use_rslora"] = spec.rslora;
  return j.dump(2, ' ', true);  // json.dumps(indent=2, sort_keys=True)'s text, ASCII escapes too
}

void lora_source(const std::string& family, Args& args, const HfConfig& config, layers::Model& m) {
  const bool made = args.has("--lora"), read = args.has("--lora_from");
  if (!made && !read) return;
  if (made && read)
    fail(DSCPP_E_INVALID_ARGUMENT, family + ": --lora makes a new adapter and --lora_from reads PEFT's: give one");
  LoraSpec spec;
  try {
    if (made) {
      spec = parse_lora_spec(args.text("--lora"));
    } else {
      const std::string dir = args.text("--lora_from");
      spec = read_adapter_config(dir + "/adapter_config.json");
      m.adapter_from = dir + "/adapter_model.safetensors";
      if (!std::filesystem::is_regular_file(m.adapter_from))
        fail(DSCPP_E_IO, "--lora_from: " + m.adapter_from +
                             " does not exist (PeftModel.save_pretrained writes it "
                             "beside adapter_config.json; dscpp reads safetensors only)");
    }
    if (!spec.regex && spec.targets.empty()) {
      const std::string type = config.string("model_type", "");
      spec.targets = default_targets(type);
      if (spec.targets.empty())
        fail(DSCPP_E_INVALID_ARGUMENT,
             "LoRA: no target given, and PEFT has no default targets for model_type \"" + type + "\": give target=…");
    }
    m.lora = std::make_unique<layers::Lora>(std::move(spec));
  } catch (const layers::Failure& f) {
    fail(f.code, family + ": " + f.message);
  }
}

void lora_finish(const std::string& family, layers::Model& m, const std::string& task_type) {
  if (!m.lora) return;
  try {
    m.lora->check();
  } catch (const layers::Failure& f) {
    fail(f.code, family + ": " + f.message);
  }
  const LoraSpec& s = m.lora->spec();
  m.adapter_config = adapter_config_json(s, m.lora->fan_in_fan_out(), task_type, m.init_from);
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", static_cast<double>(s.scale()));
  if (m.host.rank == 0)
    m.log(family + ": LoRA r=" + std::to_string(s.r) + ", scale " + scale + " on " +
          std::to_string(m.lora->adapted().size()) + " Linear modules (" +
          (m.adapter_from.empty() ? "A from PEFT's init, B zero" : "A and B from " + m.adapter_from) +
          "); every other parameter is frozen");
}

}  // namespace dscpp::models
