// Which modules a model's LoRA adapts (dscpp/layers.h's Lora): PEFT 0.12's target_modules rules,
// and the refusals of targets this library cannot adapt.
#include "dscpp/layers.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace dscpp::layers {
namespace {

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

// The model's module names with the first layer number as "*" (model.layers.*.self_attn.q_proj),
// each once, in the model's order: what a target can name, without a line per layer.
std::string shortened(const std::vector<std::string>& modules) {
  std::vector<std::string> seen;
  for (const std::string& m : modules) {
    std::string s;
    bool starred = false;
    size_t start = 0;
    while (start <= m.size()) {
      size_t end = m.find('.', start);
      if (end == std::string::npos) end = m.size();
      std::string part = m.substr(start, end - start);
      const bool number = !part.empty() &&
                          std::all_of(part.begin(), part.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; });
      if (number && !starred) part = "*", starred = true;
      s += (start == 0 ? "" : ".") + part;
      start = end + 1;
    }
    if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
  }
  std::string out;
  for (const std::string& s : seen) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// PEFT's list rule: the module is the entry, or ends with "." + entry.
bool names(const std::string& module, const std::string& t) {
  return module == t || (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
                         module[module.size() - t.size() - 1] == '.');
}

}  // namespace

float LoraSpec::scale() const {
  return static_cast<float>(alpha / (rslora ? std::sqrt(static_cast<double>(r)) : static_cast<double>(r)));
}

Lora::Lora(LoraSpec spec) : spec_(std::move(spec)) {
  if (spec_.r <= 0) fail(DSCPP_E_INVALID_ARGUMENT, "LoRA: r must be a positive rank, not " + std::to_string(spec_.r));
  // In fp32, as the ops table takes it: a value just below 1 that rounds to 1 would scale by 1/0.
  if (!(spec_.dropout >= 0 && static_cast<float>(spec_.dropout) < 1.0f))
    fail(DSCPP_E_INVALID_ARGUMENT,
         "LoRA: lora_dropout " + std::to_string(spec_.dropout) + " is not a dropout probability: it must be in [0, 1)");
  if (spec_.regex) {
    try {
      regex_ = std::regex(spec_.target_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail(DSCPP_E_INVALID_ARGUMENT,
           "LoRA: target_regex " + quoted(spec_.target_regex) + " is not a regular expression: " + e.what());
    }
  } else if (spec_.targets.empty()) {
    fail(DSCPP_E_INVALID_ARGUMENT, "LoRA: no target modules");
  }
}

// The target that names a module, as the refusals quote it.
std::string Lora::target_of(const std::string& module) const {
  if (spec_.regex) return "target_regex " + quoted(spec_.target_regex);
  for (const std::string& t : spec_.targets)
    if (names(module, t)) return "target " + quoted(t);
  return "no target";
}

bool Lora::matches(const std::string& module) const {
  if (spec_.regex) return std::regex_match(module, regex_);
  return std::any_of(spec_.targets.begin(), spec_.targets.end(),
                     [&](const std::string& t) { return names(module, t); });
}

bool Lora::linear(const std::string& module, bool tied, bool file_transposed) {
  linears_.push_back(module);
  if (!matches(module)) return false;
  if (tied)
    fail(DSCPP_E_INVALID_ARGUMENT, "LoRA: " + target_of(module) + " matches " + module +
                                       ", whose weight is tied to another parameter (the embedding): LoRA on a "
                                       "tied parameter is not supported; leave it out of the targets");
  adapted_.push_back(module);
  transposed_ = transposed_ || file_transposed;
  return true;
}

void Lora::other(const std::string& module, const std::string& what) const {
  if (matches(module))
    fail(DSCPP_E_INVALID_ARGUMENT, "LoRA: " + target_of(module) + " matches " + module + ", which is " + what +
                                       ": LoRA there is not supported (only Linear modules take an adapter)");
}

void Lora::check() const {
  const std::string list = "; the model's Linear modules are " + shortened(linears_);
  if (spec_.regex) {
    if (adapted_.empty())
      fail(DSCPP_E_INVALID_ARGUMENT,
           "LoRA: target_regex " + quoted(spec_.target_regex) + " matches no whole Linear module name" + list);
    return;
  }
  for (const std::string& t : spec_.targets)
    if (std::none_of(adapted_.begin(), adapted_.end(), [&](const std::string& m) { return names(m, t); }))
      fail(DSCPP_E_INVALID_ARGUMENT, "LoRA: target " + quoted(t) +
                                         " matches no Linear module (a module matches a target it equals or ends "
                                         "with after a dot)" +
                                         list);
}

}  // namespace dscpp::layers
