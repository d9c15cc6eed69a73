// cuda-sim's kernel side: the sim device (device/sim_cuda_device.h) with the CUDA DeviceMath
// bound — the CUDA kernels' own code built against the host launch layer, each launch's threads
// run on the CPU, checking every pointer against the device's live allocations — and the CUDA
// ops table in that same host build.
#pragma once

#include "device/sim_cuda_device.h"
#include "dscpp/model.h"
#include "kernels/gemm_math.h"

#include <cstdint>
#include <memory>

namespace dscpp {

// A cuda-sim device with its CUDA DeviceMath bound.
std::unique_ptr<SimCudaDevice> make_sim_cuda_device();
// The CUDA ops table (kernels/cuda/ops_table.h) in its host-stub build, fp32, bound to an ops
// context that `context` keeps alive (one per thread that runs layers, as on a GPU).
dscpp_ops make_sim_cuda_ops(std::shared_ptr<void>& context);
// How that table's GEMMs round their operands (`context` as make_sim_cuda_ops set it).
void set_sim_cuda_gemm_math(const std::shared_ptr<void>& context, kernels::GemmMath math);
// The most device memory that table's scratch held at once (kernels/cuda/device_scratch.h).
int64_t sim_cuda_ops_scratch_peak();
// The CPU ops table run as this device's kernels: every entry opens device memory for its call.
// What DSCPP_SIM_OPS=cpu trains with, to compare the engine's device math with the CPU device
// bit for bit (`context` keeps the wrapped table alive).
dscpp_ops make_sim_cpu_ops(Device& device, std::shared_ptr<void>& context);

}  // namespace dscpp
