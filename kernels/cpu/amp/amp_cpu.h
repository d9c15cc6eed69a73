// CPU loops over the mixed-precision element math (kernels/amp_math.h): what the engine does to
// whole gradient and parameter buffers around the optimizer step. Every loop runs on the core
// thread pool; the reductions use fixed blocks summed in block order, so results do not depend
// on the thread count.
#pragma once

#include "core/dtype.h"
#include "kernels/amp_math.h"

#include <cstdint>

namespace dscpp::kernels {

// The element math's storage code for a floating dtype; throws for the others.
hd::Storage storage_of(DType t);

// dst[i] = round(dst[i] + src[i]) in dst's dtype (f32, f16 or bf16).
void accumulate_into(void* dst, DType dst_type, const float* src, int64_t n);
// dst[i] = round(dst[i] + src[i]) in dst's dtype; src may have another floating dtype.
void add_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t n);
// dst[i] = round(src[i]) between any two floating dtypes (same dtype: a copy).
void convert_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t n);
// dst[i] = round(src[i]) in dst's dtype; src and dst may be the same buffer only for f32.
void store_from_f32(void* dst, DType dst_type, const float* src, int64_t n);
// dst[i] = float(src[i]) · scale.
void load_to_f32(const void* src, DType src_type, float* dst, float scale, int64_t n);
// x[i] = round(x[i] · scale).
void scale_inplace(void* x, DType type, float scale, int64_t n);
// Any NaN or ±inf among the n elements.
bool any_nonfinite(const void* x, DType type, int64_t n);
// Σ x[i]² in double.
double sum_squares(const void* x, DType type, int64_t n);

}  // namespace dscpp::kernels
