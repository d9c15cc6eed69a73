// The plugin ops table (include/dscpp/model.h) on a CUDA device: GEMMs through cuBLAS, the rest
// through the kernels of ops_kernels.h. Its compute dtype is fp32 (as the CPU table's,
// kernels/cpu/ops/cpu_ops.h) or bf16 / fp16: then every floating tensor is 16-bit in memory, the
// GEMMs read and write it directly with fp32 accumulation, and the other kernels load to fp32,
// compute in fp32 and round once on the store (elems.h). The table's `device` is its OpsContext:
// the stream every op is enqueued on and the cuBLAS handle bound to it. One context per thread that
// runs layers.
//
// Built with DSCPP_CUDA_HOST_STUB (kernels/cuda/sim), the same table runs on the CPU: kernels
// on the host launch layer, runtime and cuBLAS calls on kernels/cuda/sim/cuda_runtime_stub.h,
// symbols in dscpp::cuda_host; the stream is then the launch layer's stub stream (nullptr).
#pragma once

#include "core/error.h"
#include "dscpp/model.h"
#include "kernels/cuda/device_scratch.h"
#include "kernels/cuda/elems.h"
#include "kernels/cuda/launch.h"  // Stream: cudaStream_t, or the host stub's stream
#include "kernels/gemm_math.h"
#include "kernels/ops_list.h"

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
  // What cuBLAS reads for a GEMM operand of the first n elements at src in storage s: the tensor
  // itself, except fp32 under bf16/fp16 GEMM math (compute_type.h), where it is a 16-bit copy
  // in slot 0 or 1 (a GEMM's two operands), valid until that slot is staged again. Throws Error
  // when a CUDA call fails. operand_storage(s) is that operand's storage.
  const void* operand(int slot, const void* src, Storage s, int64_t n);
  Storage operand_storage(Storage s) const;
  DeviceScratch staged[2];
  DeviceScratch attention;  // blockwise attention: head-major copies and one block of queries' scores
  // The flash entries the table's own kernels take run tiled (ops_flash.cu) rather than
  // blockwise: DSCPP_FLASH_ATTENTION=tiled.
  bool tiled_attention = false;
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

// Row-major C = op(A)·op(B) for `batch` strided matrices on the context's cuBLAS handle: A and B
// as operand() gave them (both in storage ab), C in storage cs, fp32 accumulation (exact fp32,
// or TF32 under tf32 math, when everything is fp32). Returns a dscpp status. The table's gemm
// entries and its composite ops share it.
int gemm_on(const OpsContext& c, Storage ab, Storage cs, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N,
            int64_t K, float alpha, const void* A, int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb,
            float beta, void* C, int64_t ldc, int64_t sc, int64_t batch);
// Elements a row-major rows × cols operand (as op() reads it: transposed when t is DSCPP_TRANS)
// spans over a strided batch, the gaps between matrices included: what operand() must copy.
int64_t operand_span(dscpp_transpose t, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch);

// The storage of the table's floating tensors.
inline Storage storage_of(dscpp_dtype d) {
  return d == DSCPP_BF16 ? Storage::bf16 : d == DSCPP_F16 ? Storage::f16 : Storage::f32;
}
// 0 when the table can run (non-null, a floating compute dtype), else the status every op answers.
inline int check_ops(const dscpp_ops* o) {
  if (o == nullptr) return DSCPP_E_INVALID_ARGUMENT;
  return o->dtype == DSCPP_F32 || o->dtype == DSCPP_BF16 || o->dtype == DSCPP_F16 ? DSCPP_OK : DSCPP_E_UNSUPPORTED;
}
// The table's context (its `device`), and a launch's status as the table answers it.
inline OpsContext& ctx(const dscpp_ops* o) { return *static_cast<OpsContext*>(o->device); }
inline int status(Status s) { return s == kOk ? DSCPP_OK : DSCPP_E_INTERNAL; }
// A tensor argument of the table as the kernels take it.
inline Src rd(const dscpp_ops* o, const void* p) { return {p, storage_of(o->dtype)}; }
inline Dst wr(const dscpp_ops* o, void* p) { return {p, storage_of(o->dtype)}; }

// The table's entries (kernels/ops_list.h): ops_table.cpp defines the GEMMs, elementwise, row
// ops and copies, ops_layers.cpp attention (T5's biased attention included) and the linear layers.
namespace op {
DSCPP_DECLARE_OPS
}  // namespace op

// The table for compute dtype fp32, bf16 or fp16 (another dtype answers DSCPP_E_UNSUPPORTED from
// every op, as on the CPU).
dscpp_ops cuda_ops(dscpp_dtype dtype, OpsContext* context);

}  // namespace dscpp::DSCPP_CUDA_NS
