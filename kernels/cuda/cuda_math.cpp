// The CUDA DeviceMath; see cuda_math.h. Values the engine needs on the host (the overflow flag,
// norm partials) come back through Device::copy_to_host, which waits for the compute stream.
#include "kernels/cuda/cuda_math.h"

#include "kernels/cpu/amp/amp_cpu.h"  // storage_of
#include "kernels/cuda/amp.h"
#include "kernels/cuda/ops_kernels.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/quant.h"

#if defined(DSCPP_CUDA_HOST_STUB)
#include "kernels/cuda/sim/sim_kernels.h"
#else
#include "device/cuda_device.h"
#endif

#include <vector>

namespace dscpp::DSCPP_CUDA_NS {
namespace {

using kernels::storage_of;

class CudaMath final : public kernels::DeviceMath {
 public:
  explicit CudaMath(MathDevice& device) : device_(device) {}
  std::string name() const override { return device_.name(); }

  void accumulate_into(void* dst, DType dt, const float* src, int64_t n) override {
    on_device(dst, dt, n, "accumulate_into");
    on_device(src, DType::f32, n, "accumulate_into");
    ok(cuda::accumulate_into(dst, storage_of(dt), src, n, stream()), "accumulate_into");
  }
  void add_into(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    on_device(dst, dt, n, "add_into");
    on_device(src, st, n, "add_into");
    ok(cuda::add_into(dst, storage_of(dt), src, storage_of(st), n, stream()), "add_into");
  }
  void convert_into(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    on_device(dst, dt, n, "convert_into");
    on_device(src, st, n, "convert_into");
    ok(cuda::convert_into(dst, storage_of(dt), src, storage_of(st), n, stream()), "convert_into");
  }
  void store_from_f32(void* dst, DType dt, const float* src, int64_t n) override {
    convert_into(dst, dt, src, DType::f32, n);
  }
  // float(src)·scale rounds once either way: the widening is exact.
  void load_to_f32(const void* src, DType st, float* dst, float scale, int64_t n) override {
    convert_into(dst, DType::f32, src, st, n);
    if (scale != 1.0f) scale_inplace(dst, DType::f32, scale, n);
  }
  void scale_inplace(void* x, DType t, float scale, int64_t n) override {
    on_device(x, t, n, "scale_inplace");
    ok(cuda::scale_inplace(x, storage_of(t), scale, n, stream()), "scale_inplace");
  }
  bool any_nonfinite(const void* x, DType t, int64_t n) override {
    on_device(x, t, n, "any_nonfinite");
    DeviceBuffer flag(device_, sizeof(int32_t), MemCategory::buffers, /*zero=*/true);
    ok(cuda::any_nonfinite(x, storage_of(t), n, flag.as<int32_t>(), stream()), "any_nonfinite");
    int32_t seen = 0;
    device_.copy_to_host(&seen, flag.data(), sizeof(seen));
    return seen != 0;
  }
  // Block partials summed on the host in block order: the same norm for the same buffer, run
  // after run.
  double sum_squares(const void* x, DType t, int64_t n) override {
    if (n <= 0) return 0.0;
    on_device(x, t, n, "sum_squares");
    const unsigned blocks = cuda::sum_squares_blocks(n);
    DeviceBuffer partials(device_, sizeof(double) * blocks, MemCategory::buffers);
    ok(cuda::sum_squares_partials(x, storage_of(t), n, partials.as<double>(), stream()), "sum_squares_partials");
    std::vector<double> host(blocks);
    device_.copy_to_host(host.data(), partials.data(), sizeof(double) * blocks);
    double sum = 0.0;
    for (double p : host) sum += p;
    return sum;
  }
  void fill(float* x, float value, int64_t n) override {
    on_device(x, DType::f32, n, "fill");
    ok(cuda::ops::fill(x, value, n, stream()), "fill");
  }

  // The int8 kernels take fp32; 16-bit parameters go through an fp32 staging buffer, rounded
  // once into their dtype on the way back, as the CPU loops do.
  void quantize_int8_groups(const void* x, DType t, int64_t n, int64_t groups, int8_t* q, float* s) override {
    on_device(x, t, n, "quantize_int8_groups");
    on_device(q, DType::i8, n, "quantize_int8_groups");
    on_device(s, DType::f32, groups, "quantize_int8_groups");
    DeviceBuffer staged;
    const float* x32 = as_f32(x, t, n, staged);
    ok(cuda::quantize_int8_groups(x32, n, groups, q, s, stream()), "quantize_int8_groups");
  }
  void dequantize_int8_groups(const int8_t* q, const float* s, int64_t n, int64_t groups, void* x, DType t) override {
    on_device(q, DType::i8, n, "dequantize_int8_groups");
    on_device(s, DType::f32, groups, "dequantize_int8_groups");
    on_device(x, t, n, "dequantize_int8_groups");
    if (t == DType::f32) {
      ok(cuda::dequantize_int8_groups(q, s, n, groups, static_cast<float*>(x), stream()), "dequantize_int8_groups");
      return;
    }
    DeviceBuffer staged(device_, sizeof(float) * static_cast<size_t>(n), MemCategory::buffers);
    ok(cuda::dequantize_int8_groups(q, s, n, groups, staged.as<float>(), stream()), "dequantize_int8_groups");
    convert_into(x, t, staged.data(), DType::f32, n);
  }
  void quantize_int4_groups(const void* x, DType t, int64_t n, int64_t group, uint8_t* q, float* s) override {
    on_device(x, t, n, "quantize_int4_groups");
    on_device(q, DType::u8, n / 2, "quantize_int4_groups");
    on_device(s, DType::f32, group > 0 ? n / group : 0, "quantize_int4_groups");
    ok(cuda::quantize_int4_groups(x, storage_of(t), n, group, q, s, stream()), "quantize_int4_groups");
  }
  void dequantize_int4_add(const uint8_t* q, const float* s, int64_t n, int64_t group, float* acc) override {
    on_device(q, DType::u8, n / 2, "dequantize_int4_add");
    on_device(s, DType::f32, group > 0 ? n / group : 0, "dequantize_int4_add");
    on_device(acc, DType::f32, n, "dequantize_int4_add");
    ok(cuda::dequantize_int4_add(q, s, n, group, acc, stream()), "dequantize_int4_add");
  }

  void adam_step(float* w, const float* g, float* m, float* v, int64_t n,
                 const kernels::AdamCoeffs<float>& c) override {
    One one(*this, w, g, m, v, n, "adam_step");
    ok(cuda::adam_step(one.lists, c, stream()), "adam_step");
  }
  void sgd_step(float* w, const float* g, float* buf, int64_t n, const kernels::SgdCoeffs<float>& c) override {
    One one(*this, w, g, buf, nullptr, n, "sgd_step");
    ok(cuda::sgd_step(one.lists, c, stream()), "sgd_step");
  }
  void adagrad_step(float* w, const float* g, float* sum, int64_t n, const kernels::AdagradCoeffs<float>& c) override {
    One one(*this, w, g, sum, nullptr, n, "adagrad_step");
    ok(cuda::adagrad_step(one.lists, c, stream()), "adagrad_step");
  }
  void lion_step(float* w, const float* g, float* m, int64_t n, const kernels::LionCoeffs<float>& c) override {
    One one(*this, w, g, m, nullptr, n, "lion_step");
    ok(cuda::lion_step(one.lists, c, stream()), "lion_step");
  }
  // One tensor per segment: the kernels' trust ratio is per tensor, the engine's per segment.
  void lamb_step(float* w, const float* g, float* m, float* v, const std::vector<int64_t>& bounds,
                 const kernels::LambCoeffs<float>& c, double step_size, double min_coeff, double max_coeff) override {
    const size_t count = bounds.size() < 2 ? 0 : bounds.size() - 1;
    if (count == 0) return;
    const int64_t n = bounds.back();
    for (const void* p : {static_cast<const void*>(w), static_cast<const void*>(g), static_cast<const void*>(m),
                          static_cast<const void*>(v)})
      on_device(p, DType::f32, n, "lamb_step");
    std::vector<int64_t> sizes(count);
    std::vector<float*> ws(count), ms(count), vs(count);
    std::vector<const void*> gs(count);
    for (size_t i = 0; i < count; ++i) {
      const int64_t off = bounds[i];
      sizes[i] = bounds[i + 1] - off;
      ws[i] = w + off;
      gs[i] = g + off;
      ms[i] = m + off;
      vs[i] = v + off;
    }
    cuda::TensorLists t;
    t.count = static_cast<int>(count);
    t.sizes = sizes.data();
    t.w = ws.data();
    t.g = gs.data();
    t.s1 = ms.data();
    t.s2 = vs.data();
    DeviceBuffer scratch(device_, sizeof(double) * static_cast<size_t>(cuda::lamb_scratch_doubles(t)),
                         MemCategory::buffers);
    ok(cuda::lamb_step(t, c, step_size, min_coeff, max_coeff, scratch.as<double>(), stream()), "lamb_step");
    // The scratch is released when this returns; the stream orders its reuse after the kernels.
  }

 private:
  // The host arrays of a one-tensor list (they only need to live until the launch).
  struct One {
    One(CudaMath& math, float* w, const float* g, float* s1, float* s2, int64_t n, const char* what)
        : size(n), w(w), g(g), s1(s1), s2(s2) {
      for (const void* p : {static_cast<const void*>(w), static_cast<const void*>(g), static_cast<const void*>(s1),
                            static_cast<const void*>(s2)})
        if (p != nullptr) math.on_device(p, DType::f32, n, what);
      lists.count = n > 0 ? 1 : 0;
      lists.sizes = &size;
      lists.w = &this->w;
      lists.g = &this->g;
      lists.s1 = &this->s1;
      lists.s2 = &this->s2;
    }
    int64_t size;
    float* w;
    const void* g;
    float* s1;
    float* s2;
    cuda::TensorLists lists;
  };

  const float* as_f32(const void* x, DType t, int64_t n, DeviceBuffer& staged) {
    if (t == DType::f32) return static_cast<const float*>(x);
    staged = DeviceBuffer(device_, sizeof(float) * static_cast<size_t>(n), MemCategory::buffers);
    convert_into(staged.data(), DType::f32, x, t, n);
    return staged.as<float>();
  }

#if defined(DSCPP_CUDA_HOST_STUB)
  Stream stream() const { return nullptr; }
  void on_device(const void* p, DType t, int64_t n, const char* what) const {
    device_.check_device(p, n * static_cast<int64_t>(dtype_size(t)), what);
  }
  void ok(Status s, const char* what) const {
    if (s != kOk) fail("{}: {} failed (launch status {})", device_.name(), what, s);
  }
#else
  Stream stream() const { return device_.compute_stream(); }
  void on_device(const void*, DType, int64_t, const char*) const {}
  void ok(Status s, const char* what) const {
    if (s != kOk) fail("{}: {} failed: {} ({})", device_.name(), what, cudaGetErrorString(s), cudaGetErrorName(s));
  }
#endif

  MathDevice& device_;
};

}  // namespace

kernels::DeviceMath& bind_cuda_math(MathDevice& device) {
  auto math = std::make_shared<CudaMath>(device);
  device.set_math(math);
  return *math;
}

}  // namespace dscpp::DSCPP_CUDA_NS
