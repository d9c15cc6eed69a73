// The DeviceMath of a CUDA device (kernels/device_math.h): the kernels of amp.h, quant.h,
// optim.h and ops_kernels.h enqueued on the device's compute stream, scratch from the device.
// The same source builds twice: against CUDA for CudaDevice, and in host-stub mode for the
// cuda-sim device (kernels/cuda/sim/sim_kernels.h), where the kernels run on the CPU and every
// pointer is checked to be memory of that device, as a GPU would demand.
#pragma once

#include "kernels/cuda/cuda_ns.h"
#include "kernels/device_math.h"

#include <memory>

namespace dscpp {
#if defined(DSCPP_CUDA_HOST_STUB)
class SimCudaDevice;
#else
class CudaDevice;
#endif
}  // namespace dscpp

namespace dscpp::DSCPP_CUDA_NS {

#if defined(DSCPP_CUDA_HOST_STUB)
using MathDevice = SimCudaDevice;
#else
using MathDevice = CudaDevice;
#endif

// Binds the math to the device (Device::set_math) and returns it.
kernels::DeviceMath& bind_cuda_math(MathDevice& device);

}  // namespace dscpp::DSCPP_CUDA_NS
