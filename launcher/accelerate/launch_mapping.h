// What an Accelerate launch (config file and `accelerate launch` flags) means for dscpp: the
// launch plan's flags, the DeepSpeed config the ranks get, and the lines the log says about it.
// docs/accelerate.md lists every setting and what it maps to.
#pragma once

#include "launcher/launch.h"
#include "launcher/launch_plan.h"

#include <optional>
#include <string>
#include <vector>

namespace dscpp::launcher::accelerate {

struct AccelerateLaunch {
  LaunchArgs args;                 // the launch with Accelerate's settings applied
  std::string deepspeed_json;      // the effective DeepSpeed config (one line)
  std::string config_source;       // where it came from, for the log
  std::optional<int> world_size;   // num_processes, which the plan must match
  std::vector<std::string> notes;  // what the log says about the settings
};

// Whether `args` asks for Accelerate's settings: --config_file or any of its flags.
bool uses_accelerate(const LaunchArgs& args);

// Reads the config file (--config_file, else Accelerate's default file when it exists), merges
// the flags, and applies both to `args`. `local_gpus`: the GPUs this machine shows. Throws
// dscpp::Error naming the setting (and its file and line) that cannot be honoured.
AccelerateLaunch apply_accelerate(const LaunchArgs& args, const Environment& env, int local_gpus);

// The DeepSpeed config alone, for `dscpp config check --config_file`: reads and merges as above.
AccelerateLaunch derive_for_check(const std::string& config_file, const std::map<std::string, std::string>& flags,
                                  const Environment& env);

}  // namespace dscpp::launcher::accelerate
