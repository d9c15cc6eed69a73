// Mixed-precision buffer kernels: the device twins of kernels/cpu/amp/amp_cpu.h, over the same
// element math (kernels/amp_math.h). All pointers are device memory; every call is
// asynchronous on `stream` and returns the launch status (kOk for n == 0).
#pragma once

#include "kernels/amp_math.h"
#include "kernels/cuda/launch.h"

#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

using hd::Storage;

// dst[i] = round(dst[i] + src[i]) in dst's storage.
Status accumulate_into(void* dst, Storage dst_type, const float* src, int64_t n, Stream stream);
// dst[i] = round(dst[i] + src[i]); src in any storage.
Status add_into(void* dst, Storage dst_type, const void* src, Storage src_type, int64_t n, Stream stream);
// dst[i] = round(src[i]) (a cast; same storage: a copy).
Status convert_into(void* dst, Storage dst_type, const void* src, Storage src_type, int64_t n, Stream stream);
// x[i] = round(x[i] · scale).
Status scale_inplace(void* x, Storage type, float scale, int64_t n, Stream stream);
// The loss scaler's unscale with the overflow check fused in: x[i] = round(x[i] · scale), and
// *overflow = 1 if any x[i] was NaN or ±inf before scaling (*overflow is never cleared here,
// so one flag can cover many buffers; zero it before the first).
Status unscale_check(void* x, Storage type, float scale, int64_t n, int32_t* overflow, Stream stream);
// *flag = 1 if any element is NaN or ±inf (never cleared here).
Status any_nonfinite(const void* x, Storage type, int64_t n, int32_t* flag, Stream stream);

// Global-norm partial sums: partials[b] = Σ x[i]² (in double) over block b's slice, for
// b < sum_squares_blocks(n); the caller adds them in order (on the host after the copy, or
// summed across buffers first), which keeps the norm deterministic.
unsigned sum_squares_blocks(int64_t n);
Status sum_squares_partials(const void* x, Storage type, int64_t n, double* partials, Stream stream);

}  // namespace dscpp::DSCPP_CUDA_NS
