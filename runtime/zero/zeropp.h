// ZeRO++'s quantized collectives at stage 3.
//
// qwZ (zero_quantized_weights): parameter allgathers send int8. Each rank quantizes its slice in
// groups (symmetric: s = 2^8 / (2·absmax), q = clamp(rint(x·s), −128, 127), scale 1/s), the int8
// data and the fp32 scales are allgathered, and every rank dequantizes every slice, its own
// included, so all ranks hold the same gathered values. The group count follows DeepSpeed's
// rule, so groups hold 8,000–16,000 elements and a quantized element is off by at most
// absmax/256 of its group (absmax/128 within half a step of +absmax, which clamps to 127). Only the gathers
// for a layer's use are quantized: persistent groups re-gathered after the step and gathers for
// saving go in the storage dtype, as in DeepSpeed.
//
// qgZ (zero_quantized_gradients): the gradient reduce-scatter becomes two all-to-alls of int4
// data (two values a byte, s = 2^4 / (2·absmax), q in [−8, 7], groups of kQgzGroup elements,
// so |error| ≤ absmax/16 of a group per hop, absmax/8 near +absmax, which clamps to 7). With N nodes of L ranks (rank =
// node·L + local):
//   hop 1, inside the node: every slice is quantized and sent to the node's rank whose local
//          index matches the slice's owner; each rank dequantizes the L contributions to the N
//          slices it is responsible for and sums them in fp32 (the node's partial sums);
//   hop 2, across nodes (ranks with the same local index): the partial sums are re-quantized and
//          each goes to its owner, which dequantizes the N of them and sums in fp32.
// Sums only: the engine folds the 1/dp of the mean into the loss gradient at stages 1–3.
#pragma once

#include "collectives/communicator.h"
#include "core/dtype.h"
#include "device/device.h"

#include <cstdint>

namespace dscpp::runtime {

// The quantizers are kernels/cpu/quant's over the element math of kernels/quant_math.h.
inline constexpr int64_t kQgzGroup = 256;
// The group size qgZ uses for slices of `part` elements (a multiple of 16): the largest divisor
// of part that is at most kQgzGroup and even.
int64_t qgz_group_size(int64_t part);

// Starts the quantized allgather of `count` elements per rank from `src` into `dst`
// (comm.size()·count elements of `type`; src may be dst's own slot). The int8 and scale buffers
// are counted on `device` (category buffers) until wait(), which dequantizes into dst.
comm::WorkHandle quantized_allgather(comm::Communicator& comm, Device& device, const void* src, void* dst,
                                     int64_t count, DType type);

// Starts qgZ's reduce-scatter of `input` (node.size()·cross.size()·part elements of `type`,
// slice r for world rank r = cross index·L + node index) over the node group (L ranks) and the
// cross-node group (N ranks); wait() leaves this rank's summed slice in `out` (part elements of
// `type`). Hop 1 runs asynchronously; wait() finishes it, runs hop 2 and waits for it.
comm::WorkHandle quantized_reduce_scatter(comm::Communicator& node, comm::Communicator& cross, Device& device,
                                          const void* input, void* out, int64_t part, DType type);

}  // namespace dscpp::runtime
