// `dscpp export-hf CKPT OUT_DIR`: a checkpoint of any stage and world size → a directory that
// Hugging Face transformers loads with from_pretrained: config.json (the one the model was
// built from, saved with the checkpoint) and model.safetensors, or above a size shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json; parameters in the names
// the model gave them, transposed back where the files' layout is [in, out] (GPT-2's Conv1D),
// in fp32, bf16 or fp16, frozen parameters (frozen.safetensors) included. Streams tensor by
// tensor as zero-to-fp32 does. A checkpoint with LoRA adapters (lora.h) exports merged into
// the model, or as PEFT's adapter directory alone.
#pragma once

#include "checkpoint/zero_to_fp32.h"
#include "core/dtype.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dscpp::ckpt {

inline constexpr const char* kExportConfigFile = "config.json";

enum class ExportKind {
  model,    // config.json and every parameter (adapter matrices, if any, under their own names)
  merged,   // the model with every LoRA pair folded into its base weight, without the adapter matrices
  adapter,  // PEFT's adapter directory: adapter_config.json and adapter_model.safetensors, nothing else
};

struct ExportOptions {
  DType dtype = DType::f32;                      // f32, bf16 or f16
  int64_t max_shard_bytes = 5'000'000'000;       // transformers' default max_shard_size, "5GB"
  std::string config;                            // a config.json to use instead of the checkpoint's
  ExportKind kind = ExportKind::model;
  std::string base_model;  // adapter: the base_model_name_or_path to write ("": the checkpoint's)
};

struct ExportResult {
  ConsolidateResult read;
  std::vector<std::string> files;  // written into OUT_DIR, the config last
  int64_t bytes = 0;               // of tensor data
  size_t merged = 0;               // LoRA pairs folded in (merged)
  size_t adapters = 0;             // the checkpoint's adapter matrices
};

// Throws dscpp::Error naming the checkpoint when it has no config (and none is given), when a
// file fails its digest (the configs' too), when OUT_DIR cannot be written, and for `merged` and
// `adapter` when it has no adapter (or no adapter_config.json) or the adapter cannot be merged.
ExportResult export_hf(const std::string& ckpt, const std::string& out_dir, const ExportOptions& options,
                       const std::function<void(const ConsolidateProgress&)>& progress = {});

}  // namespace dscpp::ckpt
