// DeviceMath: the math the engine runs over whole buffers of one device — casts and
// accumulation around mixed precision, the overflow check and the global norm, ZeRO++
// quantization, and the optimizer updates. The CPU implementation runs the loops of
// kernels/cpu; the CUDA one enqueues the kernels of kernels/cuda on the device's compute stream.
// Both go through the same element functions (kernels/*_math.h), so they agree element for
// element; reductions (any_nonfinite, sum_squares, LAMB's norms) sum in a fixed order of their
// own, so those agree to rounding.
//
// Every pointer is memory of the device the math belongs to (host memory for the CPU math).
// Calls may be asynchronous on a device; those that return a value wait for it.
#pragma once

#include "core/dtype.h"
#include "device/device.h"
#include "kernels/optimizer_math.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::kernels {

class DeviceMath {
 public:
  virtual ~DeviceMath() = default;
  virtual std::string name() const = 0;

  // kernels/cpu/amp/amp_cpu.h states each function's contract.
  virtual void accumulate_into(void* dst, DType dst_type, const float* src, int64_t n) = 0;
  virtual void add_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) = 0;
  virtual void convert_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) = 0;
  virtual void store_from_f32(void* dst, DType dst_type, const float* src, int64_t n) = 0;
  virtual void load_to_f32(const void* src, DType src_type, float* dst, float scale, int64_t n) = 0;
  virtual void scale_inplace(void* x, DType type, float scale, int64_t n) = 0;
  virtual bool any_nonfinite(const void* x, DType type, int64_t n) = 0;
  virtual double sum_squares(const void* x, DType type, int64_t n) = 0;
  virtual void fill(float* x, float value, int64_t n) = 0;

  // ZeRO++ (kernels/cpu/quant/quant_cpu.h).
  virtual void quantize_int8_groups(const void* x, DType type, int64_t n, int64_t groups, int8_t* q,
                                    float* inv_scales) = 0;
  virtual void dequantize_int8_groups(const int8_t* q, const float* inv_scales, int64_t n, int64_t groups, void* x,
                                      DType type) = 0;
  virtual void quantize_int4_groups(const void* x, DType type, int64_t n, int64_t group, uint8_t* q,
                                    float* inv_scales) = 0;
  virtual void dequantize_int4_add(const uint8_t* q, const float* inv_scales, int64_t n, int64_t group,
                                   float* acc) = 0;

  // Optimizer updates (kernels/cpu/optim/optim_cpu.h): one flat fp32 tensor each; LAMB's trust
  // ratio per segment [bounds[i], bounds[i+1]).
  virtual void adam_step(float* w, const float* g, float* m, float* v, int64_t n, const AdamCoeffs<float>& c) = 0;
  virtual void sgd_step(float* w, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c) = 0;
  virtual void adagrad_step(float* w, const float* g, float* sum, int64_t n, const AdagradCoeffs<float>& c) = 0;
  virtual void lion_step(float* w, const float* g, float* m, int64_t n, const LionCoeffs<float>& c) = 0;
  virtual void lamb_step(float* w, const float* g, float* m, float* v, const std::vector<int64_t>& bounds,
                         const LambCoeffs<float>& c, double step_size, double min_coeff, double max_coeff) = 0;
};

// The math bound to `device` (Device::set_math), else the CPU loops when the device's memory is
// host memory. Throws for a device without host memory and without bound math.
DeviceMath& math_of(Device& device);
// The CPU loops (one instance; they keep no state).
DeviceMath& cpu_math();

}  // namespace dscpp::kernels
