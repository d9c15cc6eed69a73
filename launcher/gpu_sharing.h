// Ranks sharing a GPU. DeepSpeed's launcher gives each rank its own GPU, and so does dscpp's
// when it places ranks on GPUs; but `--num_procs N` (or a hostfile naming this machine) places
// ranks without narrowing CUDA_VISIBLE_DEVICES, so on a host with fewer GPUs than ranks the
// ranks share them (device/device_select.h: LOCAL_RANK mod the visible GPUs). NCCL refuses two
// ranks on one device, and only once every rank has started and loaded its model: the launcher
// says so in the plan and refuses before starting any. shm and gloo copy device buffers
// through host memory, so with them ranks may share (how ZeRO's multi-rank paths run on one GPU).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dscpp::launcher {

// Where dscpp-runtime's ranks train and how they talk, as the job's command line says.
struct RuntimeChoices {
  std::string device = "auto";        // --device: auto | cpu | cuda | cuda-sim
  std::string comm_backend = "auto";  // --comm_backend, else DSCPP_COMM_BACKEND ("" counts as auto)
  std::string backend_source;         // "--comm_backend nccl", "DSCPP_COMM_BACKEND=nccl"; "" = the default
};

// Whether PROGRAM runs as dscpp-runtime ranks (a model plugin, *.so, or dscpp-runtime itself):
// only then do its flags mean what runtime_choices reads.
bool runs_dscpp_runtime(const std::vector<std::string>& program);

// `program`: PROGRAM and its arguments, flags as `--flag value` or `--flag=value`; `--` ends
// dscpp-runtime's own (the rest is the plugin's). `env_backend`: DSCPP_COMM_BACKEND as the
// ranks will see it (nullopt: unset); the flag wins over it, as in dscpp-runtime.
RuntimeChoices runtime_choices(const std::vector<std::string>& program, const std::optional<std::string>& env_backend);

struct GpuSharing {
  std::string plan_line;  // "  GPUs: ..." for the plan; "" when each rank has a GPU or none trains on one
  std::string refusal;    // why the job must not start and what to do instead; "" when it may start
};

// `ranks` placed on `host`, which has `gpus` GPUs that every one of those ranks sees.
GpuSharing check_gpu_sharing(const std::string& host, int ranks, int gpus, const RuntimeChoices& choices);

}  // namespace dscpp::launcher
