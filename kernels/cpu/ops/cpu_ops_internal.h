// Shared pieces of the CPU ops table, private to kernels/cpu/ops: the dtype check, the SIMD
// dispatch attribute, parallel grain sizes, a vectorisable exp, and the functions that fill each
// part of the table. The argument rules it shares with the CUDA table are kernels/ops_args.h.
#pragma once

#include "dscpp/model.h"
#include "kernels/ops_args.h"
#include "kernels/ops_list.h"
#include "kernels/ops_math.h"

#include <cstdint>

namespace dscpp::kernels::cpu {

// Hot loops are compiled three times and the best one for the running CPU is bound once, at
// load, through an ifunc resolver that tests feature bits (x86-64-v4 = AVX-512 F/BW/DQ/VL with
// FMA, v3 = AVX2 + FMA). Each clone is auto-vectorised for its ISA; the build adds
// -fvect-cost-model=dynamic so loops with tails vectorise at -O2, and -fopenmp-simd so the
// `omp simd reduction` pragmas may reassociate float sums (nothing else changes order).
#define DSCPP_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// Work per parallel chunk, in elements: below this a loop stays on the calling thread, since
// waking a worker costs a few microseconds (~16K elements of a streaming loop).
inline constexpr int64_t kGrainElements = int64_t{1} << 15;
// Floats per 64-byte cache line: parallel splits of a row or column aligned to it never share a
// line between threads.
inline constexpr int64_t kLineFloats = 16;
// Rows per chunk for a row-wise op whose rows have `cols` elements (at least one row).
inline int64_t row_grain(int64_t cols, int64_t elements = kGrainElements) {
  return cols <= 0 ? elements : (elements + cols - 1) / cols;
}

// 0 when the table can run: non-null and fp32.
inline int check_table(const dscpp_ops* o) {
  if (o == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  return o->dtype == DSCPP_F32 ? DSCPP_OK : DSCPP_E_UNSUPPORTED;
}

// exp_f is the shared element exp (kernels/ops_math.h), the one the CUDA kernels use too.
using hd::exp_f;

// Row softmax pieces shared by the row ops and the fused attention (row_ops.cpp):
// y = softmax(a·x) over n entries (y may be x; n = 0 does nothing), returning the row's
// log Σ exp(a·x) (−∞ for n = 0); and its backward dx = a·y·(dy − Σ y·dy) (dx may be dy).
float softmax_row(const float* x, float a, float* y, int64_t n);
void softmax_row_backward(const float* y, const float* dy, float a, float* dx, int64_t n);

// GELU (tanh form) over n contiguous floats (elementwise.cpp): y = gelu(x), and its backward
// dx = dy·gelu'(x) (dx may be dy). The linear ops apply them to GEMM rows while they are hot.
void gelu_rows(const float* x, float* y, int64_t n);
void gelu_backward_rows(const float* x, const float* dy, float* dx, int64_t n);

// The table's entries (kernels/ops_list.h), defined over the files: gemm.cpp (GEMMs), cpu_ops.cpp
// (copies to and from the host), elementwise.cpp (fill … relu, bias, SiLU, SwiGLU, copy_2d, dropout),
// norm_rope.cpp (RMSNorm, rotary embeddings), row_ops.cpp (layer norm,
// softmaxes, embedding, cross-entropy), attention.cpp (fused causal attention), linear.cpp
// (linear layers with fused epilogues), biased_attention.cpp (relative position bias, masked softmax). Each checks
// the table's dtype first.
namespace op {
DSCPP_DECLARE_OPS
}  // namespace op

}  // namespace dscpp::kernels::cpu
