// The device a rank trains on, chosen by --device: its ops table for the plugin, its buffer math
// (bound to the Device) and what the communicators must know about it.
//   cpu       host memory, the CPU ops table and loops (kernels/cpu)
//   cuda      the GPU LOCAL_RANK names among the visible ones (device/cuda_device.h): cuBLAS ops
//             table and CUDA kernels on its compute stream, NCCL between ranks (CUDA builds);
//             over shm, gloo or mpi (the comm backend) more ranks than GPUs share them
//   cuda-sim  the CUDA code path run on the CPU, for testing it where there is no GPU
//             (kernels/cuda/sim/sim_kernels.h): the CUDA kernels' own code through the host
//             launch layer, every pointer checked to be device memory; the CUDA ops table in
//             its host-stub build (DSCPP_SIM_OPS=cpu: the CPU table)
//   auto      cuda when this build has CUDA and a device is visible, else cpu
#pragma once

#include "core/dtype.h"
#include "device/device.h"
#include "dscpp/model.h"
#include "kernels/gemm_math.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace dscpp::runtime {

enum class DeviceChoice { automatic, cpu, cuda, cuda_sim };
DeviceChoice parse_device_choice(std::string_view text);  // throws, listing the choices

struct RankDevice {
  std::unique_ptr<Device> device;
  std::unique_ptr<Device> host;  // host memory for offload and cpu_checkpointing (pinned next to a GPU)
  dscpp_ops ops{};
  std::shared_ptr<void> ops_context;  // what `ops` is bound to (the CUDA ops context), kept alive with it
  bool cuda = false;                  // a real CUDA device: the communicators use NCCL
  int cuda_index = -1;
  void* cuda_compute_stream = nullptr;  // cudaStream_t of the compute stream
  std::string cuda_bus_id;              // the GPU's PCI bus id: ranks sharing one have the same
  // Sets how the CUDA ops table's GEMMs round their operands (kernels/gemm_math.h); empty for the
  // CPU table, whose GEMMs are always exact fp32.
  std::function<void(kernels::GemmMath)> set_gemm_math;
  // The CUDA ops table's scratch high-water mark in bytes (device memory the engine's accounting
  // does not see); empty for the CPU table.
  std::function<int64_t()> ops_scratch_peak;
  // The table computes in bf16 and fp16 too (the CUDA table); the CPU table is fp32 only.
  bool ops_16bit = false;
};

// `comm_backend`: the backend the rank's world will use (device/device_select.h's
// comm_backend_setting), which decides whether ranks past the visible GPUs may share them.
RankDevice make_rank_device(DeviceChoice choice, std::string_view comm_backend);

// The GEMM math a run asks for: DSCPP_GEMM_MATH when set (fp32, tf32, bf16 or fp16; anything else
// is an error naming them), else that of the config's compute precision (config::PrecisionPlan::compute).
kernels::GemmMath gemm_math_for(DType compute);

// The dtype the layers compute in (the ops table's dtype): the config's compute precision when
// the table computes in 16 bits, else fp32. DSCPP_COMPUTE_DTYPE=fp32 keeps fp32 compute over
// 16-bit parameters (what every 16-bit run did before 16-bit compute existed); =auto or unset is
// the rule above; anything else is an error.
dscpp_dtype compute_dtype_for(DType compute, bool table_16bit);

}  // namespace dscpp::runtime
