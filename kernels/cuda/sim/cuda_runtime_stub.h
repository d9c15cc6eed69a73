// The part of the CUDA runtime and cuBLAS that the ops table (kernels/cuda/ops_table.cpp,
// ops_layers.cpp) calls, for its host-stub build (DSCPP_CUDA_HOST_STUB): "device" memory is
// protected host memory (core/protected_memory.h) that only these copies, memsets and GEMMs and
// the kernel launches touch, every call completes before it returns (so a stream has nothing to
// order), and the GEMM is the CPU table's. Only stub-mode sources include this, in place of
// <cuda_runtime_api.h> and <cublas_v2.h>.
//
// Everything lives in dscpp::cuda_host, not at global scope: a CUDA build links the stub and
// libcudart/libcublas into the same binaries, and the table's code (inside that namespace)
// finds these names by ordinary lookup.
#pragma once

#if !defined(DSCPP_CUDA_HOST_STUB)
#error "cuda_runtime_stub.h is the host stub; device builds use the CUDA headers"
#endif

#include "kernels/cuda/launch.h"  // Stream, Status

#include <cstddef>
#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

// ---- runtime ----
// An int, not an enum as in CUDA: the launch layer's Status is int in stub mode, and the table
// passes kernel-launch statuses and runtime-call statuses through the same checks (check.h).
using cudaError_t = Status;
inline constexpr cudaError_t cudaSuccess = 0;
inline constexpr cudaError_t cudaErrorInvalidValue = 1;
inline constexpr cudaError_t cudaErrorMemoryAllocation = 2;
inline constexpr cudaError_t cudaErrorInvalidMemcpyDirection = 21;

using cudaStream_t = Stream;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

// ---- cuBLAS ----
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_INTERNAL_ERROR = 14
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
                    CUBLAS_TF32_TENSOR_OP_MATH = 3 };

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
const char* cublasGetStatusString(cublasStatus_t status);

// Column-major, as cuBLAS documents it: for i < batchCount,
//   C_i = alpha·op(A_i)·op(B_i) + beta·C_i,  X_i = X + i·strideX,
// op(A_i) m×k, op(B_i) k×n, C_i m×n with leading dimensions lda, ldb, ldc. beta = 0 does not
// read C. Pointer mode host: alpha and beta are host scalars.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount);

// The mixed-precision form. With fp32 operands: computeType CUBLAS_COMPUTE_32F is the call
// above; the _FAST_ types round A and B to TF32 / bf16 / fp16 (kernels/gemm_math.h's emulation
// of the tensor cores' input conversion) and accumulate in fp32. With 16-bit operands (A and B
// both CUDA_R_16BF or both CUDA_R_16F, C fp32 or their type, CUBLAS_COMPUTE_32F): widened, then the
// fp32 GEMM, a 16-bit C rounded once.
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77
};
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType_t Atype,
                                          int lda, long long strideA, const void* B, cudaDataType_t Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo);

}  // namespace dscpp::DSCPP_CUDA_NS
