// The CPU DeviceMath: the loops of kernels/cpu behind the DeviceMath interface.
#include "kernels/cpu/amp/amp_cpu.h"
#include "kernels/cpu/optim/optim_cpu.h"
#include "kernels/cpu/quant/quant_cpu.h"
#include "kernels/device_math.h"

#include <algorithm>

namespace dscpp::kernels {
namespace {

class CpuMath final : public DeviceMath {
 public:
  std::string name() const override { return "cpu"; }
  void accumulate_into(void* dst, DType dt, const float* src, int64_t n) override {
    kernels::accumulate_into(dst, dt, src, n);
  }
  void add_into(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    kernels::add_into(dst, dt, src, st, n);
  }
  void convert_into(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    kernels::convert_into(dst, dt, src, st, n);
  }
  void store_from_f32(void* dst, DType dt, const float* src, int64_t n) override {
    kernels::store_from_f32(dst, dt, src, n);
  }
  void load_to_f32(const void* src, DType st, float* dst, float scale, int64_t n) override {
    kernels::load_to_f32(src, st, dst, scale, n);
  }
  void scale_inplace(void* x, DType t, float scale, int64_t n) override { kernels::scale_inplace(x, t, scale, n); }
  bool any_nonfinite(const void* x, DType t, int64_t n) override { return kernels::any_nonfinite(x, t, n); }
  double sum_squares(const void* x, DType t, int64_t n) override { return kernels::sum_squares(x, t, n); }
  void fill(float* x, float value, int64_t n) override { std::fill_n(x, n, value); }

  void quantize_int8_groups(const void* x, DType t, int64_t n, int64_t groups, int8_t* q, float* s) override {
    kernels::quantize_int8_groups(x, t, n, groups, q, s);
  }
  void dequantize_int8_groups(const int8_t* q, const float* s, int64_t n, int64_t groups, void* x, DType t) override {
    kernels::dequantize_int8_groups(q, s, n, groups, x, t);
  }
  void quantize_int4_groups(const void* x, DType t, int64_t n, int64_t group, uint8_t* q, float* s) override {
    kernels::quantize_int4_groups(x, t, n, group, q, s);
  }
  void dequantize_int4_add(const uint8_t* q, const float* s, int64_t n, int64_t group, float* acc) override {
    kernels::dequantize_int4_add(q, s, n, group, acc);
  }

  void adam_step(float* w, const float* g, float* m, float* v, int64_t n, const AdamCoeffs<float>& c) override {
    cpu::adam_step(w, g, m, v, n, c);
  }
  void sgd_step(float* w, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c) override {
    cpu::sgd_step(w, g, buf, n, c);
  }
  void adagrad_step(float* w, const float* g, float* sum, int64_t n, const AdagradCoeffs<float>& c) override {
    cpu::adagrad_step(w, g, sum, n, c);
  }
  void lion_step(float* w, const float* g, float* m, int64_t n, const LionCoeffs<float>& c) override {
    cpu::lion_step(w, g, m, n, c);
  }
  void lamb_step(float* w, const float* g, float* m, float* v, const std::vector<int64_t>& bounds,
                 const LambCoeffs<float>& c, double step_size, double min_coeff, double max_coeff) override {
    cpu::lamb_step(w, g, m, v, bounds, c, step_size, min_coeff, max_coeff);
  }
};

}  // namespace

DeviceMath& cpu_math() {
  static CpuMath math;
  return math;
}

DeviceMath& math_of(Device& device) {
  if (DeviceMath* bound = device.math()) return *bound;
  if (device.is_host()) return cpu_math();
  fail("device '{}' has no buffer math bound and its memory is not host memory (an engine bug: the device's "
       "creator binds its math)",
       device.name());
}

}  // namespace dscpp::kernels
