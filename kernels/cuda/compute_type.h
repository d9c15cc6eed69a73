// The cuBLAS compute type of a GEMM math (kernels/gemm_math.h): fp32 operands on the tensor
// cores are rounded by cuBLAS itself to the named type (the FAST compute types).
#pragma once

#include "kernels/cuda/cuda_ns.h"
#include "kernels/gemm_math.h"

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#else
#include <cublas_api.h>
#endif

namespace dscpp::DSCPP_CUDA_NS {

inline cublasComputeType_t compute_type(kernels::GemmMath m) {
  switch (m) {
    case kernels::GemmMath::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case kernels::GemmMath::bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case kernels::GemmMath::fp16: return CUBLAS_COMPUTE_32F_FAST_16F;
    case kernels::GemmMath::fp32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace dscpp::DSCPP_CUDA_NS
