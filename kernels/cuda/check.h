// The CUDA runtime API as the kernels' host code sees it — the real one, or its host stub in
// builds with DSCPP_CUDA_HOST_STUB (cuda-sim, unit tests) — with DSCPP_CUDA_CHECK.
#pragma once

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/cuda_runtime_stub.h"
#else
#include <cuda_runtime_api.h>
#endif

#include "device/cuda_check.h"
