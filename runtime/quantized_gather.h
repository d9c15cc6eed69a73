// ZeRO++ qwZ (zero_quantized_weights, engine.md 6.1): stage-3 parameter allgathers that send
// int8 instead of the 16/32-bit storage dtype.
//
// Each rank quantizes its slice in groups (symmetric: s = 2^8 / (2·absmax), q = clamp(rint(x·s),
// −128, 127), scale 1/s), the int8 data and the fp32 scales are allgathered, and every rank
// dequantizes every slice, its own included, so all ranks hold the same gathered values. The
// group count follows DeepSpeed's rule, so groups hold 8,000–16,000 elements and a quantized
// element is off by at most absmax/256 of its group (absmax/128 for +absmax itself, which
// clamps to 127). Only the gathers for a layer's use are quantized: persistent groups re-gathered
// after the step and gathers for saving go in the storage dtype, as in DeepSpeed.
#pragma once

#include "collectives/communicator.h"
#include "core/device.h"
#include "core/dtype.h"

#include <cstdint>

namespace dscpp::runtime {

// DeepSpeed's group count for n elements: start at ceil(n/8000), increase until n divides by
// 8·groups, then double while n divides by 16·groups and groups stay above 8000 elements.
// n must be a multiple of 8 (stage-3 slices are multiples of 16).
int64_t qwz_group_count(int64_t n);

// q[i] and scales[group] for n elements of x (f32, f16 or bf16) in `groups` equal groups.
void quantize_int8(const void* x, DType type, int64_t n, int64_t groups, int8_t* q, float* scales);
// out[i] = q[i]·scales[group of i], rounded into `type`.
void dequantize_int8(const int8_t* q, const float* scales, int64_t n, int64_t groups, void* out, DType type);

// Starts the quantized allgather of `count` elements per rank from `src` into `dst`
// (comm.size()·count elements of `type`; src may be dst's own slot). The int8 and scale buffers
// are counted on `device` (category buffers) until wait(), which dequantizes into dst.
comm::WorkHandle quantized_allgather(comm::Communicator& comm, Device& device, const void* src, void* dst,
                                     int64_t count, DType type);

}  // namespace dscpp::runtime
