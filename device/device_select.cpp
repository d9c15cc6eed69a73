#include "device/device_select.h"

#include "core/error.h"
#include "core/knobs.h"

#include <fmt/format.h>

namespace dscpp {
namespace {

std::string backend_text(std::string_view b) {
  if (b.empty() || b == "auto") return "the default backend (auto: nccl for ranks on GPUs)";
  return fmt::format("the {} backend", b);
}

}  // namespace

std::string comm_backend_setting(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  const char* env = knob("DSCPP_COMM_BACKEND");
  return env != nullptr ? env : "auto";
}

bool backend_is_nccl_on_gpu(std::string_view b) { return b.empty() || b == "auto" || b == "nccl"; }

bool cuda_device_shared(std::optional<int> local_rank, int visible, const std::optional<std::string>& cvd) {
  return visible > 0 && local_rank.value_or(0) >= visible && (visible > 1 || !cvd);
}

int choose_cuda_device(std::optional<int> local_rank, int visible, const std::optional<std::string>& cvd,
                       std::string_view comm_backend) {
  const std::string cvd_text = cvd ? "CUDA_VISIBLE_DEVICES=\"" + *cvd + "\"" : "CUDA_VISIBLE_DEVICES unset";
  if (visible <= 0)
    fail(
        "no CUDA device is visible to this process ({}); check the driver with nvidia-smi, or run on the CPU "
        "device",
        cvd_text);
  const int rank = local_rank.value_or(0);
  if (rank < 0) fail("LOCAL_RANK={} is negative; the launcher sets it to the rank's index on its node", rank);
  if (rank < visible) return rank;
  // One device per rank (the launcher narrowed CUDA_VISIBLE_DEVICES), or ranks sharing it: the
  // two look alike from one rank, so only the world, which sees every rank's GPU, can refuse nccl.
  if (visible == 1) return 0;
  if (backend_lets_ranks_share_gpu(comm_backend)) return rank % visible;
  fail(
      "LOCAL_RANK={} but only {} CUDA devices are visible ({}), and {} needs one GPU per rank; start at most {} "
      "ranks on this node, give each rank its own device through CUDA_VISIBLE_DEVICES, or pass --comm_backend shm "
      "or --comm_backend gloo to let ranks share the GPUs",
      rank, visible, cvd_text, backend_text(comm_backend), visible);
}

}  // namespace dscpp
