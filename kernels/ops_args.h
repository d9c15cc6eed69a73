// The argument rules every ops table applies before it touches memory (the CPU table,
// kernels/cpu/ops, and the CUDA table, kernels/cuda/ops_table.cpp): one definition, so that a
// call one table refuses the other refuses too, with the same status.
#pragma once

#include "kernels/ops_math.h"

#include <cstdint>

namespace dscpp::kernels {

// Dimensions and strides the GEMMs take as 32-bit (BLAS and cuBLAS ints, the CPU AVX-512
// kernel's A strides): 0 ≤ v < 2^31.
inline bool fits_int32(int64_t v) { return v >= 0 && v <= INT32_MAX; }
// A pointer must be non-null whenever it covers a non-empty range.
inline bool bad_ptr(const void* p, int64_t n) { return n > 0 && p == nullptr; }
// Every embedding id in [0, vocab) (host memory: the CUDA table copies the ids back first).
// Checked before anything is written, so a bad batch leaves the output untouched.
inline bool ids_in_range(const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (hd::embedding_row(ids[i], vocab, 0) < 0) return false;
  return true;
}

// T5's relative position bias (model.h ABI 8): a shape and a bucket table that
// hd::relative_bucket maps into [0, num_buckets). Beyond the CPU table's rule (num_buckets ≥ 2,
// max_distance ≥ 1) it needs an exact range of at least one bucket (e = num_buckets/2, halved
// again when bidirectional) and max_distance > e: with e = 0 the logarithm's argument is 0/0, and
// with max_distance ≤ e its divisor is ≤ 0, giving NaN or buckets below 0 (reads before the table).
inline bool relative_bias_args_ok(int64_t heads, int64_t Tq, int64_t Tk, int32_t bidirectional, int32_t num_buckets,
                                  int32_t max_distance) {
  const int32_t exact = (bidirectional != 0 ? num_buckets / 2 : num_buckets) / 2;
  return heads >= 0 && Tq >= 0 && Tk >= 0 && num_buckets >= 2 && exact >= 1 && max_distance > exact;
}

// A dropout probability (model.h ABI 10) in [0, 1): p = 1 would scale by 1/0, and NaN fails too.
inline bool dropout_p_ok(float p) {
  return p >= 0.0f && p < 1.0f;
}

}  // namespace dscpp::kernels
