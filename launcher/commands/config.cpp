// `dscpp config check FILE` and `dscpp config keys`: the loading, validation and "auto"
// resolution are configs/ (shared with the runtime); this prints the result.
#include "core/error.h"
#include "launcher/accelerate/launch_mapping.h"
#include "launcher/commands/commands.h"
#include "launcher/env_export.h"

#include <fmt/core.h>

#include <cstdio>
#include <string>

extern char** environ;

namespace dscpp::launcher {

int run_config_check(const ConfigCheckArgs& args) {
  config::LoadedConfig loaded;
  if (!args.accelerate_config_file.empty() || !args.accelerate_flags.empty()) {
    if (!args.file.empty())
      throw Error("config check: give FILE (a DeepSpeed config) or --config_file (Accelerate's), not both");
    std::map<std::string, std::string> flags = args.accelerate_flags;
    // The one flag both spell alike: a run fact for a DeepSpeed FILE, Accelerate's setting here.
    if (args.facts.gradient_accumulation_steps)
      flags["gradient_accumulation_steps"] = std::to_string(*args.facts.gradient_accumulation_steps);
    accelerate::AccelerateLaunch acc =
        accelerate::derive_for_check(args.accelerate_config_file, flags, environment_from(::environ));
    for (const auto& note : acc.notes) std::fprintf(stderr, "dscpp: accelerate: %s\n", note.c_str());
    std::fprintf(stdout, "effective deepspeed config: %s\n", acc.deepspeed_json.c_str());
    loaded = config::load_config_text(acc.deepspeed_json, acc.config_source, args.facts);
  } else {
    if (args.file.empty()) throw Error("config check: no FILE (a DeepSpeed config) and no --config_file");
    loaded = config::load_config_file(args.file, args.facts);
  }
  const std::string& name = loaded.file_name;
  for (const auto& d : loaded.diagnostics.all()) {
    if (d.severity == config::Diagnostic::Severity::warning)
      std::fputs((config::format_diagnostic(d, name) + "\n").c_str(), stderr);
  }
  if (!loaded.ok()) {
    auto errors = loaded.diagnostics.errors();
    config::Diagnostics only_errors;
    for (const auto& e : errors) only_errors.error(e.path, e.loc, e.message);
    std::fputs(only_errors.format(name).c_str(), stderr);
    std::fputs(
        fmt::format("{}: {} error{}; the config was not accepted\n", name, errors.size(), errors.size() == 1 ? "" : "s")
            .c_str(),
        stderr);
    return 1;
  }
  if (!args.quiet) {
    std::string text =
        args.json ? config::format_effective_config_json(loaded) : config::format_effective_config_table(loaded);
    std::fputs(text.c_str(), stdout);
  }
  auto unsupported = config::unsupported_features(loaded.config);
  for (const auto& f : unsupported)
    std::fputs(
        fmt::format("{}: note: valid for DeepSpeed, but dscpp's runtime does not implement {}\n", name, f).c_str(),
        stderr);
  for (const auto& m : config::monitors_not_written(loaded.config))
    std::fputs(fmt::format("{}: warning: {}\n", name, m).c_str(), stderr);
  const config::DsConfig& c = loaded.config;
  const long long tbs = c.train_batch_size.value_or(0), mbs = c.train_micro_batch_size_per_gpu.value_or(0),
                  gas = c.gradient_accumulation_steps.value_or(0);
  std::fputs(fmt::format("{}: OK (ZeRO stage {}, {}, train_batch_size {} = micro {} × accumulation {} × {} "
                         "data-parallel ranks)\n",
                         name, c.zero_optimization.stage,
                         c.fp16.enabled   ? "fp16"
                         : c.bf16.enabled ? "bf16"
                                          : "fp32",
                         tbs, mbs, gas, mbs * gas > 0 ? tbs / (mbs * gas) : 0)
                 .c_str(),
             stderr);
  return 0;
}

int run_config_keys() {
  size_t count = 0;
  std::string text = config::format_schema_keys(&count);
  std::fputs(text.c_str(), stdout);
  std::fputs(fmt::format("{} keys\n", count).c_str(), stdout);
  return 0;
}

}  // namespace dscpp::launcher
