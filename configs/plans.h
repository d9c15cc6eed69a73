// What a checked config resolves to, for the runtime to run: each plan turns the keys of one
// concern into typed values once, with DeepSpeed's defaults applied, so the runtime never reads
// the keys themselves or re-checks them (the checks are configs/rules.cpp's).
#pragma once

#include "configs/ds_config.h"
#include "core/dtype.h"

#include <optional>

namespace dscpp::config {

// Where offloaded state goes: zero_optimization.offload_optimizer / offload_param "device".
enum class OffloadDevice { none, cpu, nvme };
const char* offload_device_name(OffloadDevice d);
// The section's device (none when the section is absent); the schema admits only these three.
OffloadDevice optimizer_offload_device(const ZeroConfig& z);
OffloadDevice param_offload_device(const ZeroConfig& z);

// Mixed precision: fp16 / bf16 / data_types / communication_data_type.
struct PrecisionPlan {
  DType params = DType::f32;  // fp16.enabled → f16, bf16.enabled → bf16
  // data_types.grad_accum_dtype, else DeepSpeed's default: fp32 for bf16 without ZeRO (its
  // BF16_Optimizer keeps fp32 gradients), else the parameters' dtype.
  DType grads = DType::f32;
  // communication_data_type, else bf16 for bf16 without ZeRO (BF16_Optimizer reduces its fp32
  // gradients in bf16), else unset: the gradients' own dtype.
  std::optional<DType> wire;
};
PrecisionPlan precision_plan(const DsConfig& c);

}  // namespace dscpp::config
