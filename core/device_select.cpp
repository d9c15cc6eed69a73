#include "core/device_select.h"

#include "core/error.h"

namespace dscpp {

int choose_cuda_device(std::optional<int> local_rank, int visible, const std::optional<std::string>& cvd) {
  const std::string cvd_text = cvd ? "CUDA_VISIBLE_DEVICES=\"" + *cvd + "\"" : "CUDA_VISIBLE_DEVICES unset";
  if (visible <= 0)
    fail(
        "no CUDA device is visible to this process ({}); check the driver with nvidia-smi, or run on the CPU "
        "device",
        cvd_text);
  const int rank = local_rank.value_or(0);
  if (rank < 0) fail("LOCAL_RANK={} is negative; the launcher sets it to the rank's index on its node", rank);
  if (rank < visible) return rank;
  if (visible == 1) return 0;  // one device per rank: the launcher narrowed CUDA_VISIBLE_DEVICES
  fail(
      "LOCAL_RANK={} but only {} CUDA devices are visible ({}); start at most {} ranks on this node, or give each "
      "rank its own device through CUDA_VISIBLE_DEVICES",
      rank, visible, cvd_text, visible);
}

}  // namespace dscpp
