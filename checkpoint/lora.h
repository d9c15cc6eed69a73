// LoRA adapters in a checkpoint, as Hugging Face PEFT names and merges them: the manifest's
// "adapter_params" are "<module>.lora_A.weight" ([r, in]) and "<module>.lora_B.weight"
// ([out, r]) beside a base weight "<module>.weight" ([out, in] in memory, trained or frozen), and
// the checkpoint's adapter_config.json (PEFT's) says how B·A is scaled. export-hf --adapter writes
// them as PEFT's adapter directory; export-hf --merge folds them into their base weights as
// PeftModel.merge_and_unload does.
#pragma once

#include "checkpoint/zero_to_fp32.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dscpp::ckpt {

// PEFT's name of an adapter tensor in adapter_model.safetensors: this + the parameter's name.
inline constexpr const char* kPeftPrefix = "base_model.model.";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";

// The manifest's "adapter_params" (empty when it has none).
std::vector<std::string> adapter_params(const Manifest& m);

struct LoraPair {
  std::string base, a, b;  // "<module>.weight", "<module>.lora_A.weight", "<module>.lora_B.weight"
};

// The manifest's adapter parameters as pairs, in the order of their lora_A. Throws dscpp::Error
// naming a parameter that is neither LoRA matrix or whose other half is missing.
std::vector<LoraPair> lora_pairs(const Manifest& m);

// PEFT's scaling of B·A (LoraLayer.update_layer): lora_alpha / r, or lora_alpha / √r with
// use_rslora.
struct LoraScaling {
  int64_t r = 0;
  float scale = 0;
};

// From adapter_config.json (`path` for messages). Throws dscpp::Error for what one scale cannot
// follow: per-module ranks or alphas (rank_pattern, alpha_pattern), DoRA, a peft_type other than
// LORA, or an r or lora_alpha that is missing or not a positive number.
LoraScaling lora_scaling(const nlohmann::json& config, const std::string& path);

// w ([out, in]) += scale · b ([out, r]) · a ([r, in]), in fp32.
void merge_lora(float* w, const float* a, const float* b, int64_t out, int64_t in, int64_t r, float scale);

// export-hf --merge: for each base weight a pair targets, the adjustment that folds the pair in,
// reading A and B when the base weight is written (so memory holds one base weight and its two
// factors at a time).
class LoraMerge {
 public:
  // Checks every pair against the reader's parameters (all three present, shapes [out, in],
  // [r, in], [out, r] with the config's r) before anything is written.
  LoraMerge(CheckpointReader& reader, const nlohmann::json& config, const std::string& config_path);
  // Whether `name` is an adapter matrix (a merged export leaves it out).
  bool is_adapter(const std::string& name) const { return adapters_.count(name) > 0; }
  // Folds the pair that targets `name` in; empty when none does.
  CheckpointReader::Adjust adjust(const std::string& name) const;
  size_t pairs() const { return pairs_.size(); }

 private:
  CheckpointReader& reader_;
  LoraScaling scaling_;
  std::map<std::string, LoraPair> pairs_;  // by base weight
  std::set<std::string> adapters_;
};

}  // namespace dscpp::ckpt
