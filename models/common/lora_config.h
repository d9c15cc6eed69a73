// LoRA as every family takes it (Hugging Face PEFT 0.12's; the layers' side is dscpp/layers.h's
// Lora). Plugin arguments:
//   --lora SPEC        a new adapter: key=value pairs separated by commas, a bare word continuing
//                      the previous key's list, e.g. r=16,alpha=32,target=q_proj,v_proj. Keys: r (8),
//                      alpha / lora_alpha (8), dropout / lora_dropout (0, in [0, 1)), target /
//                      target_modules (PEFT's list: a module matches an entry it equals or ends with
//                      after a dot; default PEFT's for the model_type), target_regex (PEFT's string
//                      form: a regular expression the whole module name must match), rslora /
//                      use_rslora (a bare flag, or =true/false: scale alpha/√r instead of alpha/r)
//   --lora_from DIR    PEFT's adapter directory (PeftModel.save_pretrained's): the settings from
//                      DIR/adapter_config.json, the initial A and B from DIR/adapter_model.safetensors
// Either freezes every other parameter; the model then declares PEFT's adapter_config.json, which the
// runtime saves beside its checkpoints.
#pragma once

#include "causal_lm.h"
#include "dscpp/layers.h"

#include <string>

namespace dscpp::models {

// A --lora SPEC; failures name the key or item and what it expected. No target leaves both empty.
layers::LoraSpec parse_lora_spec(const std::string& spec);

// The settings of a PEFT adapter_config.json; failures name the file and the key.
layers::LoraSpec read_adapter_config(const std::string& path);

// PEFT 0.12's adapter_config.json for an adapter made with these settings, as LoraConfig.save_pretrained
// writes it (the same keys and text; a target list sorted); base_model: the base model's directory.
std::string adapter_config_json(const layers::LoraSpec& spec, bool fan_in_fan_out, const std::string& task_type,
                                const std::string& base_model);

// --lora / --lora_from into m.lora (which the layers' Env::lora must then point at) and
// m.adapter_from; `config` is the model's config.json (PEFT's default targets follow its model_type).
void lora_source(const std::string& family, Args& args, const HfConfig& config, layers::Model& m);

// Once the layers are made: fails for a target that matched no Linear, and sets m.adapter_config
// (task_type "CAUSAL_LM" or "SEQ_2_SEQ_LM", PEFT's). Nothing without a LoRA.
void lora_finish(const std::string& family, layers::Model& m, const std::string& task_type);

}  // namespace dscpp::models
