#include <fmt/core.h>

#include <libssh2.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "build_config.h"
#include "core/dtype.h"
#include "launcher/cuda_report.h"
#include "launcher/commands.h"
#include "launcher/job_commands.h"

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

int run_report() {
  auto yes = [](bool b) { return b ? "yes" : "no (not found at build time; reconfigure after installing it)"; };
  std::string out =
      fmt::format("dscpp {} (built with gcc {}, libssh2 {})\n", DSCPP_VERSION, __VERSION__, LIBSSH2_VERSION);
  std::string mpirun = first_line_of("mpirun --version 2>/dev/null");
  std::string srun = first_line_of("srun --version 2>/dev/null");
  if (srun.empty() && !first_line_of("command -v srun").empty()) srun = "installed (no SLURM cluster configured here)";
  out += fmt::format("machine: {} cores online; mpirun: {}; srun: {}\n", sysconf(_SC_NPROCESSORS_ONLN),
                     mpirun.empty() ? "not found" : mpirun, srun.empty() ? "not found" : srun);
  out += "engines found when this build was configured:\n";
  out += cuda_report();
  out += fmt::format("  {:<10} {}\n", "gloo", yes(DSCPP_HAVE_GLOO));
  out += fmt::format("  {:<10} {}\n", "mpi", yes(DSCPP_HAVE_MPI));
  out += fmt::format("  {:<10} {}\n", "io_uring", yes(DSCPP_HAVE_IO_URING));
  out += fmt::format("  {:<10} {}\n", "libaio", yes(DSCPP_HAVE_LIBAIO));
  __builtin_cpu_init();
  std::string simd;
  // __builtin_cpu_supports takes only literals.
  auto add = [&](bool has, const char* name) {
    if (has) simd += std::string(simd.empty() ? "" : " ") + name;
  };
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("f16c"), "f16c");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  out += fmt::format("  {:<10} {}\n", "cpu", simd.empty() ? "baseline x86-64" : simd);
  out += fmt::format("  {:<10} {}\n", "fp16 cast", cpu_has_f16c() ? "F16C instructions" : "portable loop (no F16C)");
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace dscpp::launcher
