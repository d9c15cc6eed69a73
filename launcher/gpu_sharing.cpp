#include "launcher/gpu_sharing.h"

#include "device/device_select.h"

#include <fmt/format.h>

#include <string_view>

namespace dscpp::launcher {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The backend as the refusal names it: what was asked for and where, and why that means NCCL.
std::string backend_text(const RuntimeChoices& c) {
  if (c.backend_source.empty()) return "the default backend (no --comm_backend: auto picks nccl for ranks on GPUs)";
  if (c.comm_backend == "nccl") return fmt::format("the nccl backend ({})", c.backend_source);
  return fmt::format("the auto backend ({}: nccl for ranks on GPUs)", c.backend_source);
}

}  // namespace

bool runs_dscpp_runtime(const std::vector<std::string>& program) {
  if (program.empty()) return false;
  const std::string& exe = program.front();
  return ends_with(exe, ".so") || exe == "dscpp-runtime" || ends_with(exe, "/dscpp-runtime");
}

RuntimeChoices runtime_choices(const std::vector<std::string>& program, const std::optional<std::string>& env_backend) {
  RuntimeChoices c;
  if (env_backend) {
    c.comm_backend = env_backend->empty() ? "auto" : *env_backend;
    c.backend_source = "DSCPP_COMM_BACKEND=" + *env_backend;
  }
  for (size_t i = 1; i < program.size(); ++i) {
    std::string_view arg = program[i];
    if (arg == "--") break;
    for (std::string_view flag : {"--device", "--comm_backend"}) {
      std::string value;
      if (arg == flag && i + 1 < program.size())
        value = program[++i];
      else if (arg.size() > flag.size() && arg.substr(0, flag.size()) == flag && arg[flag.size()] == '=')
        value = std::string(arg.substr(flag.size() + 1));
      else
        continue;
      if (flag == "--device") {
        c.device = value;
      } else {
        c.comm_backend = value.empty() ? "auto" : value;
        c.backend_source = "--comm_backend " + value;
      }
      break;
    }
  }
  return c;
}

GpuSharing check_gpu_sharing(const std::string& host, int ranks, int gpus, const RuntimeChoices& c) {
  GpuSharing s;
  const bool on_gpu = c.device == "auto" || c.device == "cuda";
  if (!on_gpu || gpus <= 0 || ranks <= gpus) return s;
  s.plan_line = fmt::format("  GPUs: {} ranks share {} GPU{} on {} (more ranks than GPUs)", ranks, gpus,
                            gpus == 1 ? "" : "s", host);
  // The other backends let ranks share (device/device_select.h); a name dscpp-runtime does not
  // know is left for it to report as such.
  if (!backend_is_nccl_on_gpu(c.comm_backend)) return s;
  s.refusal = fmt::format(
      "{} ranks on {} would share its {} GPU{}, but {} needs one GPU per rank (NCCL refuses two ranks on one "
      "device); start at most {} rank{} there (--num_procs {} / --num_gpus {}), or pass --comm_backend shm or "
      "--comm_backend gloo to the program to let ranks share the GPU{} (or --device cpu to train on the CPU)",
      ranks, host, gpus, gpus == 1 ? "" : "s", backend_text(c), gpus, gpus == 1 ? "" : "s", gpus, gpus,
      gpus == 1 ? "" : "s");
  return s;
}

}  // namespace dscpp::launcher
