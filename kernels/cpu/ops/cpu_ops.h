// The CPU implementation of the plugin ops table (include/dscpp/model.h): GEMMs, linear layers and
// fused causal attention on dscpp's AVX-512 kernel (gemm*.cpp, linear.cpp, attention*.cpp) or
// OpenBLAS, everything else in vectorised loops on the core thread pool (elementwise.cpp,
// row_ops.cpp; their private pieces in cpu_ops_internal.h, the argument rules the CUDA table shares
// in kernels/ops_args.h). Results are bitwise the same for any thread count, except GEMMs on the
// OpenBLAS backend (its blocking depends on its thread count): the AVX-512 GEMM gives every tile to
// one thread with a fixed summation order, and reductions never depend on how rows or columns are
// split between threads.
#pragma once

#include "dscpp/model.h"

#include <string>

namespace dscpp::kernels {

// The ops table for compute dtype `dtype` on the CPU. fp32 is implemented; other dtypes make
// every op return DSCPP_E_UNSUPPORTED (fp16/bf16 compute arrives with mixed precision).
// `device` is stored in the table as its binding.
dscpp_ops cpu_ops(dscpp_dtype dtype, void* device = nullptr);

// One thread count for both pools that run CPU math: OpenBLAS's and dscpp's (core/thread_pool.h).
void set_cpu_threads(int n);

// Which kernel runs fp32 GEMMs: dscpp's own AVX-512 kernel (the default where the CPU has
// AVX-512 F/VL/DQ/BW) or OpenBLAS's sgemm. DSCPP_GEMM=openblas|avx512 chooses at start-up;
// set_gemm_backend switches later (tests, benchmarks) and throws when the CPU lacks AVX-512.
enum class GemmBackend { openblas = 0, avx512 = 1 };
GemmBackend gemm_backend();
void set_gemm_backend(GemmBackend b);
bool gemm_backend_available(GemmBackend b);  // openblas always; avx512 when the CPU has it
// "dscpp AVX-512 (12x32 tiles)" or "OpenBLAS sgemm".
std::string gemm_description();

// "OpenBLAS 0.3.21, core Haswell (OPENBLAS_CORETYPE=Haswell), 2 threads; fp32 GEMM: …" —
// logged at start and printed by benchmarks so a run states which GEMM kernel it used.
std::string blas_description();

}  // namespace dscpp::kernels
