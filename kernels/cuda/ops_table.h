// The plugin ops table (include/dscpp/model.h) on a CUDA device: fp32 like the CPU table
// (kernels/cpu/ops/cpu_ops.h), GEMMs through cuBLAS, the rest through the kernels of
// ops_kernels.h. The table's `device` is its OpsContext: the stream every op is enqueued on and
// the cuBLAS handle bound to it. One context per thread that runs layers.
//
// Built with DSCPP_CUDA_HOST_STUB (kernels/cuda/sim), the same table runs on the CPU: kernels
// on the host launch layer, runtime and cuBLAS calls on kernels/cuda/sim/cuda_runtime_stub.h,
// symbols in dscpp::cuda_host; the stream is then the launch layer's stub stream (nullptr).
#pragma once

#include "core/error.h"
#include "dscpp/model.h"
#include "kernels/cuda/device_scratch.h"
#include "kernels/cuda/launch.h"  // Stream: cudaStream_t, or the host stub's stream
#include "kernels/gemm_math.h"

#include <cstdint>

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/cuda_runtime_stub.h"  // cublasHandle_t
#else
typedef struct cublasContext* cublasHandle_t;
#endif

#include <memory>

namespace dscpp::DSCPP_CUDA_NS {

class CudnnAttention;  // cudnn_attention.h (GPU builds only)
class LtLinear;        // lt_linear.h (GPU builds only)

struct OpsContext {
  explicit OpsContext(Stream stream);  // creates the cuBLAS handle on the current device
  ~OpsContext();
  OpsContext(const OpsContext&) = delete;
  OpsContext& operator=(const OpsContext&) = delete;

  Stream stream;
  cublasHandle_t blas = nullptr;
  kernels::GemmMath gemm_math = kernels::GemmMath::fp32;  // how the GEMMs round their operands
  int32_t* flag = nullptr;  // device: "a bad id / target was seen"
  DeviceScratch row_loss, row_hit;  // cross-entropy's per-row results
  // The scratch of the ops that need some (column-reduction partials, the embedding gradient's
  // segments, a fused bias gradient); valid until the next op that asks for scratch.
  DeviceScratch scratch;
  float* column_scratch(int64_t rows, int64_t cols, int outputs);
  // Under bf16/fp16 GEMM math a GEMM's operands are cast to 16 bits first (compute_type.h): a
  // copy of the first n fp32 elements at src in slot 0 or 1 (a GEMM's two operands), valid
  // until that slot is staged again. Throws Error when a CUDA call fails.
  const void* stage(int slot, const void* src, int64_t n);
  DeviceScratch staged[2];
  DeviceScratch attention;  // blockwise attention: head-major copies and one block of queries' scores
  // cuDNN's fused attention, for the flash entries under 16-bit GEMM math: made on first use
  // (null when unavailable; then the table's own kernels run).
  std::unique_ptr<CudnnAttention> cudnn_attention;
  bool cudnn_attention_tried = false;
  // cuBLASLt's fused epilogues for the linear layers: made on first use (null: unavailable or
  // DSCPP_CUBLASLT=0; then GEMM + epilogue kernels).
  std::unique_ptr<LtLinear> lt_linear;
  bool lt_linear_tried = false;
};

// The C ABI must not see exceptions: a failed CUDA call inside an op becomes DSCPP_E_INTERNAL
// (the message goes to the log through the caller's error path; here it is dropped).
template <class F>
int guarded(F f) {
  try {
    return f();
  } catch (const Error&) {
    return DSCPP_E_INTERNAL;
  }
}

// Row-major C = op(A)·op(B) for `batch` strided matrices on the context's cuBLAS handle in its
// GEMM math; A and B are fp32, or under 16-bit math the copies stage() made. Returns a dscpp
// status. The table's gemm entries and its composite ops share it.
int gemm_on(const OpsContext& c, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb, float beta, float* C,
            int64_t ldc, int64_t sc, int64_t batch);
// Elements a row-major rows × cols operand (as op() reads it: transposed when t is DSCPP_TRANS)
// spans over a strided batch, the gaps between matrices included: what stage() must copy.
int64_t operand_span(dscpp_transpose t, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch);

// fp32 is implemented; other dtypes answer DSCPP_E_UNSUPPORTED from every op, as on the CPU.
dscpp_ops cuda_ops(dscpp_dtype dtype, OpsContext* context);

}  // namespace dscpp::DSCPP_CUDA_NS
