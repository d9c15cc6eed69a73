// `dscpp config check FILE` and `dscpp config keys`: the loading, validation and "auto"
// resolution are configs/ (shared with the runtime); this prints the result.
#include "launcher/commands/commands.h"

#include <fmt/core.h>

#include <cstdio>
#include <string>

namespace dscpp::launcher {

int run_config_check(const ConfigCheckArgs& args) {
  config::LoadedConfig loaded = config::load_config_file(args.file, args.facts);
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
