// The DeepSpeed config an Accelerate launch hands the program, by Accelerate's rules
// (its DeepSpeedPlugin and set_mixed_precision; docs/accelerate.md lists them):
//   - with a deepspeed_config_file, that JSON, whose "auto" values the plugin settings fill
//     (given as flags, or Accelerate's defaults: ZeRO stage 2, no offload, no 16-bit save); a
//     plugin setting in the file's deepspeed_config section (or mixed_precision from the file)
//     is then an error, as in Accelerate;
//   - without one, the config the plugin builds from its settings;
//   - then mixed_precision adds or fills fp16/bf16.
// Values the run decides ("auto" batch sizes, bucket sizes, ...) stay "auto" for dscpp-runtime
// to resolve as it resolves any DeepSpeed config.
#pragma once

#include "launcher/accelerate/settings.h"

#include <string>

namespace dscpp::launcher::accelerate {

struct DerivedConfig {
  std::string json;    // the DeepSpeed config, compact JSON on one line
  std::string source;  // "built from Accelerate's settings" or "DS.json with Accelerate's settings"
};

// Reads the deepspeed_config_file (relative to the working directory, as the program would).
// Throws dscpp::Error for Accelerate's conflicts and for a JSON that cannot be read.
DerivedConfig derive_deepspeed_config(const Settings& settings);

// The names of the plugin settings Accelerate refuses beside a deepspeed_config_file.
const std::vector<std::string>& plugin_settings_beside_json();

}  // namespace dscpp::launcher::accelerate
