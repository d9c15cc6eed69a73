// `dscpp report` (`ds_report`'s role): what this build contains and what this machine offers.
// The CUDA half is cuda_report.cpp, which alone knows how to ask CUDA without linking it.
#include "build_config.h"
#include "core/dtype.h"
#include "core/knobs.h"
#include "launcher/commands/commands.h"
#include "launcher/commands/cuda_report.h"
#include "launcher/job_commands.h"

#include <fmt/core.h>
#include <libssh2.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace dscpp::launcher {

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
  out += "environment variables dscpp reads (docs/knobs.md), with the values set here:\n";
  const std::string knobs = format_knobs();
  for (size_t at = 0, end; at < knobs.size(); at = end + 1) {
    end = knobs.find('\n', at);
    out += "  " + knobs.substr(at, end - at) + "\n";
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace dscpp::launcher
