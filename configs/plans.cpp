#include "configs/plans.h"

#include "core/error.h"

namespace dscpp::config {

namespace {
// A dtype key the schema accepted (kDtypeChoices) and the rules narrowed to what runs.
DType floating(const std::string& name, const char* key) {
  const std::optional<DType> t = parse_dtype(name);
  if (!t || (*t != DType::f32 && *t != DType::f16 && *t != DType::bf16))
    fail("internal: {} \"{}\" reached the runtime; the config check should have refused it", key, name);
  return *t;
}
OffloadDevice device_named(const std::string& name, const char* key) {
  if (name == "none") return OffloadDevice::none;
  if (name == "cpu") return OffloadDevice::cpu;
  if (name == "nvme") return OffloadDevice::nvme;
  fail("internal: {}.device \"{}\" reached the runtime; the config check should have refused it", key, name);
}
}  // namespace

const char* offload_device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
    case OffloadDevice::none: break;
  }
  return "none";
}

OffloadDevice optimizer_offload_device(const ZeroConfig& z) {
  return z.offload_optimizer ? device_named(z.offload_optimizer->device, "zero_optimization.offload_optimizer")
                             : OffloadDevice::none;
}

OffloadDevice param_offload_device(const ZeroConfig& z) {
  return z.offload_param ? device_named(z.offload_param->device, "zero_optimization.offload_param")
                         : OffloadDevice::none;
}

PrecisionPlan precision_plan(const DsConfig& c) {
  PrecisionPlan p;
  if (c.fp16.enabled) p.params = DType::f16;
  if (c.bf16.enabled) p.params = DType::bf16;
  const bool zero = c.zero_optimization.stage > 0;
  if (c.data_types.grad_accum_dtype)
    p.grads = floating(*c.data_types.grad_accum_dtype, "data_types.grad_accum_dtype");
  else
    p.grads = p.params == DType::bf16 && !zero ? DType::f32 : p.params;
  if (c.communication_data_type)
    p.wire = floating(*c.communication_data_type, "communication_data_type");
  else if (p.params == DType::bf16 && !zero)
    p.wire = DType::bf16;
  return p;
}

}  // namespace dscpp::config
