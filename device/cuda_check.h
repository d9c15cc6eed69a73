// Error checks for CUDA runtime calls: the message names the failing call and CUDA's
// explanation, as NCCL's CUDACHECK does, and throws dscpp::Error. The includer brings the CUDA
// runtime API into scope first (<cuda_runtime_api.h>, or the kernels' host stub in cuda-sim
// builds: kernels/cuda/check.h), so this header depends on nothing above core.
#pragma once

#include "core/error.h"

#define DSCPP_CUDA_CHECK(call)                                                                                      \
  do {                                                                                                              \
    const cudaError_t dscpp_err_ = (call);                                                                          \
    if (dscpp_err_ != cudaSuccess)                                                                                  \
      ::dscpp::fail("{} failed: {} ({} = {})", #call, cudaGetErrorString(dscpp_err_), cudaGetErrorName(dscpp_err_), \
                    static_cast<int>(dscpp_err_));                                                                  \
  } while (0)
