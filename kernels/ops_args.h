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

}  // namespace dscpp::kernels
