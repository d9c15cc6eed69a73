// Which CUDA device a rank uses, decided without CUDA so the rule is unit-tested everywhere:
// device LOCAL_RANK among the visible ones, or the only visible device when the launcher gave
// each rank its own CUDA_VISIBLE_DEVICES (dscpp's launcher does, see launcher/launch_plan.cpp).
// More ranks than devices may share them (LOCAL_RANK mod visible) only over a backend that
// stages through host memory: NCCL refuses two ranks on one device.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dscpp {

// Whether `comm_backend` (a --comm_backend or DSCPP_COMM_BACKEND value; "" is auto) means NCCL
// for ranks on GPUs: nccl, and auto. NCCL needs a GPU per rank.
bool backend_is_nccl_on_gpu(std::string_view comm_backend);
// Whether ranks on one host may train on the same GPU: every other backend (shm, gloo, mpi,
// hierarchical) copies device buffers through host memory.
inline bool backend_lets_ranks_share_gpu(std::string_view comm_backend) {
  return !backend_is_nccl_on_gpu(comm_backend);
}

// The backend a rank runs with, for the device choice: `flag` (dscpp-runtime's --comm_backend)
// when given, else DSCPP_COMM_BACKEND, else "auto". Unchecked: the world names a misspelt one.
std::string comm_backend_setting(std::string_view flag);

// `local_rank` from LOCAL_RANK (nullopt when unset: 0), `visible` from cudaGetDeviceCount,
// `cuda_visible_devices` the variable's value for messages (nullopt when unset),
// `comm_backend` as for backend_lets_ranks_share_gpu. Throws dscpp::Error naming the
// variables and the remedy when no device fits.
int choose_cuda_device(std::optional<int> local_rank, int visible,
                       const std::optional<std::string>& cuda_visible_devices, std::string_view comm_backend = "auto");

// Whether the device choose_cuda_device picked is certainly shared with another rank of this
// host: LOCAL_RANK is past the visible devices, and either several are visible or
// CUDA_VISIBLE_DEVICES is unset. One device under a set CUDA_VISIBLE_DEVICES is taken to be
// this rank's own (the launcher narrowed it), so that case says false.
bool cuda_device_shared(std::optional<int> local_rank, int visible,
                        const std::optional<std::string>& cuda_visible_devices);

}  // namespace dscpp
