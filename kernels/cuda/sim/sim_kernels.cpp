#include "kernels/cuda/sim/sim_kernels.h"

#include "core/protected_memory.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cuda/cuda_math.h"
#include "kernels/cuda/ops_table.h"
#include "kernels/ops_list.h"

#include <cstddef>
#include <cstdlib>

namespace dscpp {

std::unique_ptr<SimCudaDevice> make_sim_cuda_device() {
  auto device = std::make_unique<SimCudaDevice>();
  cuda::bind_cuda_math(*device);
  return device;
}

namespace {

// An entry of the kernel-table wrapper: opens device memory to the call, then forwards it to the
// same entry of the wrapped table (which the wrapper's `device` field points to).
template <class Entry>
struct AsKernel;
template <class... Args>
struct AsKernel<int (*)(const dscpp_ops*, Args...)> {
  template <int (*dscpp_ops::*entry)(const dscpp_ops*, Args...)>
  static int call(const dscpp_ops* self, Args... args) {
    ProtectedAccess open;
    const auto* inner = static_cast<const dscpp_ops*>(self->device);
    return (inner->*entry)(inner, args...);
  }
};

}  // namespace

dscpp_ops make_sim_cpu_ops(Device& device, std::shared_ptr<void>& context) {
  auto inner = std::make_shared<dscpp_ops>(kernels::cpu_ops(DSCPP_F32, &device));
  context = inner;
  dscpp_ops t = *inner;
  t.device = inner.get();
#define DSCPP_AS_KERNEL(name) t.name = &AsKernel<decltype(dscpp_ops::name)>::call<&dscpp_ops::name>;
  DSCPP_OPS_TABLE(DSCPP_AS_KERNEL)
#undef DSCPP_AS_KERNEL
  return t;
}

dscpp_ops make_sim_cuda_ops(std::shared_ptr<void>& context) {
  auto ops_context = std::make_shared<cuda::OpsContext>(nullptr);
  context = ops_context;
  return cuda::cuda_ops(DSCPP_F32, ops_context.get());
}

int64_t sim_cuda_ops_scratch_peak() {
  return cuda_host::scratch_bytes().peak.load();
}

void set_sim_cuda_gemm_math(const std::shared_ptr<void>& context, kernels::GemmMath math) {
  static_cast<cuda::OpsContext*>(context.get())->gemm_math = math;
}

}  // namespace dscpp
