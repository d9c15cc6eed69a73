// `dscpp export-hf CKPT OUT_DIR`: a checkpoint of any stage and world size → a directory that
// Hugging Face transformers loads with from_pretrained: config.json (the one the model was
// built from, saved with the checkpoint) and model.safetensors, or above a size shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json; parameters in the names
// the model gave them, transposed back where the files' layout is [in, out] (GPT-2's Conv1D),
// in fp32, bf16 or fp16. Streams tensor by tensor as zero-to-fp32 does.
#pragma once

#include "checkpoint/zero_to_fp32.h"
#include "core/dtype.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dscpp::ckpt {

inline constexpr const char* kExportConfigFile = "config.json";

struct ExportOptions {
  DType dtype = DType::f32;                      // f32, bf16 or f16
  int64_t max_shard_bytes = 5'000'000'000;       // transformers' default max_shard_size, "5GB"
  std::string config;                            // a config.json to use instead of the checkpoint's
};

struct ExportResult {
  ConsolidateResult read;
  std::vector<std::string> files;  // written into OUT_DIR, config.json last
  int64_t bytes = 0;               // of tensor data
};

// Throws dscpp::Error naming the checkpoint when it has no config (and none is given), when a
// file fails its digest, or when OUT_DIR cannot be written.
ExportResult export_hf(const std::string& ckpt, const std::string& out_dir, const ExportOptions& options,
                       const std::function<void(const ConsolidateProgress&)>& progress = {});

}  // namespace dscpp::ckpt
