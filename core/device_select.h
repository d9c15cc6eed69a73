// Which CUDA device a rank uses, decided without CUDA so the rule is unit-tested everywhere:
// device LOCAL_RANK among the visible ones, or the only visible device when the launcher gave
// each rank its own CUDA_VISIBLE_DEVICES (dscpp's launcher does, see launcher/world.cpp).
#pragma once

#include <optional>
#include <string>

namespace dscpp {

// `local_rank` from LOCAL_RANK (nullopt when unset: 0), `visible` from cudaGetDeviceCount,
// `cuda_visible_devices` the variable's value for messages (nullopt when unset). Throws
// dscpp::Error naming the variables and the remedy when no device fits.
int choose_cuda_device(std::optional<int> local_rank, int visible,
                       const std::optional<std::string>& cuda_visible_devices);

}  // namespace dscpp
