// The host stub of the CUDA runtime and cuBLAS calls of the ops table (cuda_runtime_stub.h).
#include "kernels/cuda/sim/cuda_runtime_stub.h"

#include "core/protected_memory.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/gemm_math.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace dscpp::DSCPP_CUDA_NS {
namespace {
std::mutex malloc_mutex;
std::unordered_map<void*, size_t> malloc_sizes;  // cudaMalloc's blocks: cudaFree takes no size
}  // namespace

// ---- runtime ----

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;  // as CUDA: success and a null pointer
  // Protected memory, as cuda-sim's device allocations are: page-aligned (cudaMalloc promises
  // 256 bytes), and only launches and copies can touch it.
  *ptr = protected_allocate(bytes);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard lock(malloc_mutex);
  malloc_sizes[*ptr] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  size_t bytes = 0;
  {
    std::lock_guard lock(malloc_mutex);
    auto it = malloc_sizes.find(ptr);
    if (it == malloc_sizes.end()) return cudaErrorInvalidValue;
    bytes = it->second;
    malloc_sizes.erase(it);
  }
  protected_release(ptr, bytes);
  return cudaSuccess;
}

// Every kind is one host copy: host and "device" memory are the same memory here. memmove,
// because the table's to_host/from_host may be handed one buffer as source and destination.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  ProtectedAccess on_device;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  if (bytes == 0) return cudaSuccess;
  if (ptr == nullptr) return cudaErrorInvalidValue;
  ProtectedAccess on_device;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

// Nothing is ever pending: every stub call and kernel launch finishes before it returns.
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    default: return "unrecognized error code";
  }
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    default: return "cudaErrorUnknown";
  }
}

// ---- cuBLAS ----

// The handle carries the CPU table whose GEMM does the work. The stream and math mode are kept
// only so that the calls behave as cuBLAS's do; fp32 on the CPU has no TF32 mode to honour.
struct cublasContext {
  dscpp_ops cpu = kernels::cpu_ops(DSCPP_F32);
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext;
  return *handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    default: return "unknown error";
  }
}

namespace {
dscpp_transpose row_major_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? DSCPP_NO_TRANS : DSCPP_TRANS;  // real data: conjugate-transpose is transpose
}
}  // namespace

// A column-major matrix is the row-major transpose over the same memory and leading dimension,
// so column-major C = op(A)·op(B) is row-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the CPU table's row-major
// GEMM with the operands and m/n swapped and the transposes kept. Its checks of the leading
// dimensions (≥ the stored row length, at least 1) are then cuBLAS's lda ≥ max(1, m or k),
// ldb ≥ max(1, k or n), ldc ≥ max(1, m); what it refuses besides (negative strides, null
// matrices) is undefined for cuBLAS and an INVALID_VALUE here.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const auto op_ok = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!op_ok(transa) || !op_ok(transb) || m < 0 || n < 0 || k < 0 || batchCount < 0 || alpha == nullptr ||
      beta == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  const dscpp_ops& cpu = handle->cpu;
  ProtectedAccess on_device;  // the GEMM "kernel" (the pool's workers inherit the access)
  const int s = cpu.gemm_strided_batched(&cpu, row_major_op(transb), row_major_op(transa), n, m, k, *alpha, B, ldb,
                                         strideB, A, lda, strideA, *beta, C, ldc, strideC, batchCount);
  return s == DSCPP_OK ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

namespace {
// The elements a strided batch of column-major rows × cols matrices spans (the gaps between
// matrices included: the GEMM never reads them).
size_t span_of(int rows, int cols, int ld, long long stride, int batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return size_t((long long)(batch - 1) * stride + (long long)(cols - 1) * ld + rows);
}
// A copy of such a span as fp32, each element as the tensor cores would read it: fp32 rounded
// for `math`, or 16-bit bits widened.
std::vector<float> widened_span(const void* x, cudaDataType_t type, size_t span, kernels::GemmMath math) {
  std::vector<float> out(span);
  const auto* f = static_cast<const float*>(x);
  const auto* h = static_cast<const uint16_t*>(x);
  for (size_t i = 0; i < span; ++i)
    out[i] = type == CUDA_R_16BF  ? bf16_bits_to_float(h[i])
             : type == CUDA_R_16F ? fp16_bits_to_float(h[i])
                                  : kernels::round_for_gemm(f[i], math);
  return out;
}
}  // namespace

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType_t Atype,
                                          int lda, long long strideA, const void* B, cudaDataType_t Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  const bool half = Atype == Btype && (Atype == CUDA_R_16BF || Atype == CUDA_R_16F);
  if ((Atype != CUDA_R_32F && !half) || Btype != Atype || (Ctype != CUDA_R_32F && Ctype != Atype))
    return CUBLAS_STATUS_INVALID_VALUE;
  kernels::GemmMath math;
  switch (computeType) {
    case CUBLAS_COMPUTE_32F: math = kernels::GemmMath::fp32; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: math = kernels::GemmMath::tf32; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: math = kernels::GemmMath::bf16; break;
    case CUBLAS_COMPUTE_32F_FAST_16F: math = kernels::GemmMath::fp16; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (half && math != kernels::GemmMath::fp32) return CUBLAS_STATUS_INVALID_VALUE;
  const auto* a = static_cast<const float*>(A);
  const auto* b = static_cast<const float*>(B);
  std::vector<float> ra, rb;
  if (half || math != kernels::GemmMath::fp32) {
    if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    ProtectedAccess on_device;  // reading the operands is part of the "kernel"
    ra = widened_span(A, Atype,
                      span_of(transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m, lda, strideA, batchCount),
                      math);
    rb = widened_span(B, Btype,
                      span_of(transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k, ldb, strideB, batchCount),
                      math);
    if (!ra.empty()) a = ra.data();
    if (!rb.empty()) b = rb.data();
  }
  if (Ctype == CUDA_R_32F)
    return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, static_cast<const float*>(alpha), a, lda,
                                     strideA, b, ldb, strideB, static_cast<const float*>(beta), static_cast<float*>(C),
                                     ldc, strideC, batchCount);
  // A 16-bit C: its span widened (exactly, gaps included), the fp32 GEMM there, every element
  // rounded back once (the gaps round-trip unchanged).
  ProtectedAccess on_device;
  std::vector<float> c32 = widened_span(C, Ctype, span_of(m, n, ldc, strideC, batchCount), kernels::GemmMath::fp32);
  const cublasStatus_t st =
      cublasSgemmStridedBatched(handle, transa, transb, m, n, k, static_cast<const float*>(alpha), a, lda, strideA, b,
                                ldb, strideB, static_cast<const float*>(beta), c32.data(), ldc, strideC, batchCount);
  auto* h = static_cast<uint16_t*>(C);
  for (size_t i = 0; i < c32.size(); ++i)
    h[i] = Ctype == CUDA_R_16BF ? float_to_bf16_bits(c32[i]) : float_to_fp16_bits(c32[i]);
  return st;
}

}  // namespace dscpp::DSCPP_CUDA_NS
