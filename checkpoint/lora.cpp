#include "checkpoint/lora.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

namespace dscpp::ckpt {
namespace {

constexpr std::string_view kA = ".lora_A.weight", kB = ".lora_B.weight";

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string module_of(const std::string& name, std::string_view tail) {
  return name.substr(0, name.size() - tail.size());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A positive number at `key` of the config (PEFT's r is an int, lora_alpha an int or a float).
double positive(const nlohmann::json& config, const char* key, const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number() || it->get<double>() <= 0)
    fail("{}: \"{}\" must be a positive number, found {}", path, key, it == config.end() ? "none" : it->dump());
  return it->get<double>();
}

}  // namespace

std::vector<std::string> adapter_params(const Manifest& m) {
  return m.has("adapter_params") ? m.get<std::vector<std::string>>("adapter_params") : std::vector<std::string>{};
}

std::vector<LoraPair> lora_pairs(const Manifest& m) {
  const std::vector<std::string> names = adapter_params(m);
  const std::set<std::string> listed(names.begin(), names.end());
  std::vector<LoraPair> pairs;
  for (const std::string& name : names) {
    if (ends_with(name, kB)) {
      if (!listed.count(module_of(name, kB) + std::string(kA)))
        fail("checkpoint {}: adapter parameter '{}' has no '{}{}' beside it", m.tag_dir, name, module_of(name, kB), kA);
      continue;  // its pair is made at its lora_A
    }
    if (!ends_with(name, kA))
      fail(
          "checkpoint {}: adapter parameter '{}' is neither a LoRA A ('<module>{}') nor a LoRA B ('<module>{}') "
          "matrix; only LoRA's can be merged",
          m.tag_dir, name, kA, kB);
    const std::string module = module_of(name, kA);
    if (!listed.count(module + std::string(kB)))
      fail("checkpoint {}: adapter parameter '{}' has no '{}{}' beside it", m.tag_dir, name, module, kB);
    pairs.push_back({module + ".weight", name, module + std::string(kB)});
  }
  return pairs;
}

LoraScaling lora_scaling(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) fail("{}: expected a JSON object, found {}", path, config.type_name());
  if (config.contains("peft_type") && config["peft_type"] != "LORA")
    fail("{}: peft_type is {}; only LoRA adapters (\"LORA\") are merged", path, config["peft_type"].dump());
  // A per-module rank or alpha would give each module its own scale; PEFT writes both as {} when unused.
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (config.contains(key) && !config[key].is_null() && !config[key].empty())
      fail(
          "{}: \"{}\" is {}: per-module ranks and alphas are not merged (only one r and lora_alpha for every "
          "module)",
          path, key, config[key].dump());
  // DoRA rescales the merged weight by a learned magnitude per column: not B·A alone.
  if (config.value("use_dora", false)) fail("{}: use_dora is true; DoRA adapters are not merged", path);
  const double r = positive(config, "r", path), alpha = positive(config, "lora_alpha", path);
  if (r != std::floor(r)) fail("{}: \"r\" must be a whole number, found {}", path, config["r"].dump());
  LoraScaling s;
  s.r = static_cast<int64_t>(r);
  s.scale = static_cast<float>(config.value("use_rslora", false) ? alpha / std::sqrt(r) : alpha / r);
  return s;
}

void merge_lora(float* w, const float* a, const float* b, int64_t out, int64_t in, int64_t r, float scale) {
  // Row by row of B·A, so each pass runs along rows of A and W.
  std::vector<float> delta(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int64_t k = 0; k < r; ++k) {
      const float bk = b[o * r + k];
      const float* ak = a + k * in;
      for (int64_t j = 0; j < in; ++j) delta[static_cast<size_t>(j)] += bk * ak[j];
    }
    float* wo = w + o * in;
    for (int64_t j = 0; j < in; ++j) wo[j] += scale * delta[static_cast<size_t>(j)];
  }
}

LoraMerge::LoraMerge(CheckpointReader& reader, const nlohmann::json& config, const std::string& config_path)
    : reader_(reader), scaling_(lora_scaling(config, config_path)) {
  const std::string& tag = reader.result().tag_dir;
  for (LoraPair& p : lora_pairs(reader.manifest())) {
    const int64_t base = reader.find(p.base), a = reader.find(p.a), b = reader.find(p.b);
    if (a < 0 || b < 0) fail("checkpoint {}: adapter parameter '{}' is listed but not saved", tag, a < 0 ? p.a : p.b);
    if (base < 0) fail("checkpoint {}: '{}' targets '{}', which is not a parameter of it", tag, p.a, p.base);
    const auto& ws = reader.params()[static_cast<size_t>(base)].shape;
    const auto& as = reader.params()[static_cast<size_t>(a)].shape;
    const auto& bs = reader.params()[static_cast<size_t>(b)].shape;
    if (ws.size() != 2 || as.size() != 2 || bs.size() != 2 || as[0] != scaling_.r || bs[1] != scaling_.r ||
        as[1] != ws[1] || bs[0] != ws[0])
      fail(
          "checkpoint {}: LoRA pair of '{}' does not fit it: '{}' {} and '{}' {} with r = {} ({}) need [{}, in] "
          "and [out, {}] for a base weight [out, in], and it is {}",
          tag, p.base, p.a, shape_text(as), p.b, shape_text(bs), scaling_.r, config_path, scaling_.r, scaling_.r,
          shape_text(ws));
    if (pairs_.count(p.base)) fail("checkpoint {}: two LoRA pairs target '{}'", tag, p.base);
    adapters_.insert(p.a);
    adapters_.insert(p.b);
    pairs_.emplace(p.base, std::move(p));
  }
}

CheckpointReader::Adjust LoraMerge::adjust(const std::string& name) const {
  auto it = pairs_.find(name);
  if (it == pairs_.end()) return {};
  const LoraPair& p = it->second;
  return [this, &p](std::vector<float>& w) {
    const size_t a = static_cast<size_t>(reader_.find(p.a)), b = static_cast<size_t>(reader_.find(p.b));
    const std::vector<int64_t>& as = reader_.params()[a].shape;
    const int64_t r = as[0], in = as[1], out = reader_.params()[b].shape[0];
    std::vector<float> av(static_cast<size_t>(r * in)), bv(static_cast<size_t>(out * r));
    reader_.read(a, 0, r * in, av.data());
    reader_.read(b, 0, out * r, bv.data());
    merge_lora(w.data(), av.data(), bv.data(), out, in, r, scaling_.scale);
  };
}

}  // namespace dscpp::ckpt
