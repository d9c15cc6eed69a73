// Error checks for CUDA runtime calls: the message names the failing call and CUDA's
// explanation, as NCCL's CUDACHECK does, and throws dscpp::Error.
#pragma once

#include "core/error.h"

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#else
#include <cuda_runtime_api.h>
#endif

#define DSCPP_CUDA_CHECK(call)                                                                                      \
  do {                                                                                                              \
    const cudaError_t dscpp_err_ = (call);                                                                          \
    if (dscpp_err_ != cudaSuccess)                                                                                  \
      ::dscpp::fail("{} failed: {} ({} = {})", #call, cudaGetErrorString(dscpp_err_), cudaGetErrorName(dscpp_err_), \
                    static_cast<int>(dscpp_err_));                                                                  \
  } while (0)
