// Loading a DeepSpeed config: parse, read into typed structs with strict key checking,
// resolve "auto" from what the run knows, derive the batch-size triple, check the
// cross-key rules. Everything wrong is reported at once, each with its path and line.
#pragma once

#include "configs/diagnostics.h"
#include "configs/ds_config.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::config {

// What the launcher and runtime know about the run. Each unset fact takes the HF Trainer's
// default when an "auto" needs it; facts that have no default (hidden size, total steps)
// make such an "auto" an error that names the flag supplying them.
struct RunFacts {
  std::optional<i64> world_size;                   // default 1
  std::optional<i64> hidden_size;                  // the model's; no default
  std::optional<i64> micro_batch;                  // per-rank micro batch; HF default 8
  std::optional<i64> gradient_accumulation_steps;  // default 1
  std::optional<i64> total_steps;                  // optimizer steps of the run; no default
  std::optional<double> learning_rate;             // 5e-5
  std::optional<double> weight_decay;              // 0
  std::optional<double> adam_beta1;                // 0.9
  std::optional<double> adam_beta2;                // 0.999
  std::optional<double> adam_epsilon;              // 1e-8
  std::optional<double> max_grad_norm;             // 1.0
  std::optional<i64> warmup_steps;                 // 0
  std::optional<double> warmup_ratio;              // 0
  std::optional<std::string> lr_scheduler_type;    // without a scheduler block; see DscppConfig
  std::optional<bool> fp16;                        // off
  std::optional<bool> bf16;                        // off
  // How the caller names these facts in its own CLI, for "pass --X" hints.
  std::string total_steps_flag = "--total_steps";
  std::string hidden_size_flag = "--hidden_size";
};

struct Origin {
  enum class Source { file, auto_resolved, derived, deprecated_key, auto_default };
  Source source = Source::file;
  Location loc;
  std::string detail;  // how the value was obtained (formula, the alias that was used, ...)
};

std::string describe_origin(const Origin& o);

struct LoadedConfig {
  std::string file_name;  // for messages; "<text>" when loaded from a string
  DsConfig config;
  std::map<std::string, Origin> origins;  // by JSON path; a path not here has its default
  Diagnostics diagnostics;
  bool ok() const { return !diagnostics.has_errors(); }
};

// `path` may also be a URL-safe base64 encoding of the JSON, as DeepSpeed accepts.
LoadedConfig load_config_file(const std::string& path, const RunFacts& facts);
LoadedConfig load_config_text(std::string_view text, std::string_view name, const RunFacts& facts);

// Valid DeepSpeed features this config switches on that the dscpp runtime does not run
// (pipeline/tensor parallelism, compression, apex amp, ...), as short human descriptions.
std::vector<std::string> unsupported_features(const DsConfig& c);

// Monitors the config enables that dscpp does not write (wandb, comet: their vendors' services),
// one warning each; the run goes on with the others.
std::vector<std::string> monitors_not_written(const DsConfig& c);

// The effective config: every key with its value and where it came from.
std::string format_effective_config_table(const LoadedConfig& loaded);
// The effective config as a DeepSpeed JSON document (every key, defaults filled in).
std::string format_effective_config_json(const LoadedConfig& loaded);
// Every key of the schema with its default ("dscpp config keys"); `count` gets the number.
std::string format_schema_keys(size_t* count = nullptr);

// Closest candidate by edit distance, or "" when nothing is close enough to suggest.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace dscpp::config
