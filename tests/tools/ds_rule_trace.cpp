// Prints what dscpp decides for a DeepSpeed config, one fact a line, so that a script can put
// the same config through DeepSpeed's own classes and compare (tests/system/ds_rules.py).
//
//   ds_rule_trace loss-scale CONFIG.json PATTERN
//       PATTERN: '.' = clean step, 'X' = overflow. After each step: "<scale> <hysteresis>";
//       "raise" (and the end) where the scaler stops the run at the minimum scale.
//   ds_rule_trace precision CONFIG.json
//       "accepted <grad accumulation dtype>", or "refused <key>" for each error of the config.
//
// The config goes through the loader and the plans as the runtime's does, so the trace also
// covers how the fp16 and data_types keys become the scaler's options and the gradients' dtype.
#include "configs/load.h"
#include "configs/plans.h"
#include "core/dtype.h"
#include "core/error.h"
#include "runtime/optim/loss_scaler.h"

#include <cstdio>
#include <exception>
#include <string>

namespace {

int usage() {
  std::fprintf(stderr, "usage: ds_rule_trace loss-scale CONFIG.json PATTERN | precision CONFIG.json\n");
  return 2;
}

int loss_scale(const dscpp::config::LoadedConfig& loaded, const std::string& pattern) {
  dscpp::runtime::LossScaler scaler(dscpp::config::loss_scale_plan(loaded.config));
  for (char c : pattern) {
    if (c != '.' && c != 'X') return usage();
    try {
      scaler.update(c == 'X');
    } catch (const dscpp::Error&) {
      std::printf("raise\n");
      return 0;
    }
    std::printf("%.17g %lld\n", scaler.scale(), static_cast<long long>(scaler.state().cur_hysteresis));
  }
  return 0;
}

int precision(const dscpp::config::LoadedConfig& loaded) {
  if (loaded.diagnostics.has_errors()) {
    for (const auto& d : loaded.diagnostics.errors()) std::printf("refused %s\n", d.path.c_str());
    return 0;
  }
  const dscpp::config::PrecisionPlan p = dscpp::config::precision_plan(loaded.config);
  std::printf("accepted %s\n", std::string(dscpp::dtype_name(p.grads)).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  try {
    dscpp::config::LoadedConfig loaded = dscpp::config::load_config_file(argv[2], {});
    if (mode == "precision" && argc == 3) return precision(loaded);
    if (mode == "loss-scale" && argc == 4) {
      if (!loaded.ok()) {
        std::fprintf(stderr, "%s", loaded.diagnostics.format(argv[2]).c_str());
        return 1;
      }
      return loss_scale(loaded, argv[3]);
    }
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_rule_trace: %s\n", e.what());
    return 1;
  }
}
