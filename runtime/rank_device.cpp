#include "runtime/rank_device.h"

#include "build_config.h"
#include "core/error.h"
#include "core/knobs.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cuda/sim/sim_kernels.h"

#include <cstdlib>

#if DSCPP_HAVE_CUDA
#include "device/cuda_device.h"
#include "kernels/cuda/cuda_math.h"
#include "kernels/cuda/ops_table.h"

#include <cuda_runtime_api.h>
#endif

namespace dscpp::runtime {

DeviceChoice parse_device_choice(std::string_view text) {
  if (text == "auto") return DeviceChoice::automatic;
  if (text == "cpu") return DeviceChoice::cpu;
  if (text == "cuda") return DeviceChoice::cuda;
  if (text == "cuda-sim") return DeviceChoice::cuda_sim;
  fail("--device {}: expected auto, cpu, cuda or cuda-sim", text);
}

namespace {

#if DSCPP_HAVE_CUDA
bool cuda_visible() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

RankDevice make_cuda(std::string_view comm_backend) {
  RankDevice r;
  std::unique_ptr<CudaDevice> device = make_cuda_device_from_env(comm_backend);
  cuda::bind_cuda_math(*device);
  auto context = std::make_shared<cuda::OpsContext>(device->compute_stream());
  r.ops = cuda::cuda_ops(DSCPP_F32, context.get());
  r.set_gemm_math = [c = context.get()](kernels::GemmMath m) { c->gemm_math = m; };
  r.ops_scratch_peak = [] { return cuda::scratch_bytes().peak.load(); };
  r.ops_16bit = true;
  r.ops_context = context;
  r.cuda = true;
  r.cuda_index = device->index();
  r.cuda_compute_stream = device->compute_stream();
  char bus[32] = "";
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device->index()) == cudaSuccess) r.cuda_bus_id = bus;
  r.device = std::move(device);
  r.host = make_pinned_host_device();
  return r;
}
#else
bool cuda_visible() { return false; }

RankDevice make_cuda(std::string_view) {
  fail("--device cuda: this dscpp-runtime was built without CUDA (nvcc was not found when it was configured; "
       "`dscpp report` shows the build); rebuild with the CUDA toolkit or use --device cpu");
}
#endif

}  // namespace

RankDevice make_rank_device(DeviceChoice choice, std::string_view comm_backend) {
  if (choice == DeviceChoice::automatic) choice = cuda_visible() ? DeviceChoice::cuda : DeviceChoice::cpu;
  if (choice == DeviceChoice::cuda) return make_cuda(comm_backend);
  RankDevice r;
  r.host = make_host_device();
  if (choice == DeviceChoice::cuda_sim) {
    r.device = make_sim_cuda_device();
    // DSCPP_SIM_OPS=cpu keeps the CPU ops table (the memory is host memory either way): the
    // engine's device math alone is then compared with the CPU device bit for bit, while the
    // CUDA table reorders the row ops' sums (tests/system/device_path.sh runs both).
    const char* table = knob("DSCPP_SIM_OPS");
    if (table != nullptr && std::string_view(table) == "cpu") {
      r.ops = make_sim_cpu_ops(*r.device, r.ops_context);
    } else {
      r.ops = make_sim_cuda_ops(r.ops_context);
      r.set_gemm_math = [c = r.ops_context](kernels::GemmMath m) { set_sim_cuda_gemm_math(c, m); };
      r.ops_scratch_peak = sim_cuda_ops_scratch_peak;
      r.ops_16bit = true;
    }
  } else {
    r.device = make_cpu_device();
    r.ops = kernels::cpu_ops(DSCPP_F32, r.device.get());
  }
  return r;
}

kernels::GemmMath gemm_math_for(DType compute) {
  if (const char* env = knob("DSCPP_GEMM_MATH"); env != nullptr && *env != '\0') {
    if (auto m = kernels::parse_gemm_math(env)) return *m;
    fail("DSCPP_GEMM_MATH={}: expected fp32, tf32, bf16 or fp16", env);
  }
  return compute == DType::bf16  ? kernels::GemmMath::bf16
         : compute == DType::f16 ? kernels::GemmMath::fp16
                                 : kernels::GemmMath::fp32;
}

dscpp_dtype compute_dtype_for(DType compute, bool table_16bit) {
  if (const char* env = knob("DSCPP_COMPUTE_DTYPE"); env != nullptr && *env != '\0') {
    const std::string_view v = env;
    if (v == "fp32") return DSCPP_F32;
    if (v != "auto") fail("DSCPP_COMPUTE_DTYPE={}: expected auto or fp32", v);
  }
  if (!table_16bit) return DSCPP_F32;
  return compute == DType::bf16 ? DSCPP_BF16 : compute == DType::f16 ? DSCPP_F16 : DSCPP_F32;
}

}  // namespace dscpp::runtime
