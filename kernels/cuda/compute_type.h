// How cuBLAS and cuBLASLt run a GEMM math (kernels/gemm_math.h). Under bf16 and fp16 the table
// casts both operands to 16 bits first (OpsContext::stage) and calls 16-bit GEMMs with fp32
// accumulation: cuBLAS's FAST_16BF/FAST_16F compute types over fp32 operands are allowed to
// pick TF32 kernels, and on an H200 they did (half the bf16 tensor-core rate, measured with
// ncu: sm90_xmma_gemm_f32f32_tf32f32_*). tf32 keeps fp32 operands with the FAST_TF32 type.
#pragma once

#include "kernels/cuda/cuda_ns.h"
#include "kernels/cuda/elems.h"
#include "kernels/gemm_math.h"

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#else
#include <cublas_api.h>
#endif

namespace dscpp::DSCPP_CUDA_NS {

// True when the GEMM's operands are 16-bit copies of the fp32 tensors.
inline bool stages_operands(kernels::GemmMath m) {
  return m == kernels::GemmMath::bf16 || m == kernels::GemmMath::fp16;
}

// The element type of the operands cuBLAS reads.
inline cudaDataType_t operand_type(kernels::GemmMath m) {
  return m == kernels::GemmMath::bf16 ? CUDA_R_16BF : m == kernels::GemmMath::fp16 ? CUDA_R_16F : CUDA_R_32F;
}

// The cuBLAS element type of a tensor in storage s.
inline cudaDataType_t data_type(Storage s) {
  return s == Storage::bf16 ? CUDA_R_16BF : s == Storage::f16 ? CUDA_R_16F : CUDA_R_32F;
}

inline cublasComputeType_t compute_type(kernels::GemmMath m) {
  return m == kernels::GemmMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

}  // namespace dscpp::DSCPP_CUDA_NS
