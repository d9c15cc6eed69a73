// The plugin ops table (include/dscpp/model.h) on a CUDA device: fp32 like the CPU table
// (kernels/cpu/ops/cpu_ops.h), GEMMs through cuBLAS, the rest through the kernels of
// ops_kernels.h. The table's `device` is its OpsContext: the stream every op is enqueued on and
// the cuBLAS handle bound to it. One context per thread that runs layers.
//
// Built with DSCPP_CUDA_HOST_STUB (kernels/cuda/sim), the same table runs on the CPU: kernels
// on the host launch layer, runtime and cuBLAS calls on kernels/cuda/sim/cuda_runtime_stub.h,
// symbols in dscpp::cuda_host; the stream is then the launch layer's stub stream (nullptr).
#pragma once

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
  // cuDNN's fused attention, for the flash entries under 16-bit GEMM math: made on first use
  // (null when unavailable; then the table's own kernels run).
  std::unique_ptr<CudnnAttention> cudnn_attention;
  bool cudnn_attention_tried = false;
  // cuBLASLt's fused epilogues for the linear layers: made on first use (null: unavailable or
  // DSCPP_CUBLASLT=0; then GEMM + epilogue kernels).
  std::unique_ptr<LtLinear> lt_linear;
  bool lt_linear_tried = false;
};

// fp32 is implemented; other dtypes answer DSCPP_E_UNSUPPORTED from every op, as on the CPU.
dscpp_ops cuda_ops(dscpp_dtype dtype, OpsContext* context);

}  // namespace dscpp::DSCPP_CUDA_NS
