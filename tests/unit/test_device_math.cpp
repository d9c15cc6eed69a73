// DeviceMath (kernels/device_math.h): the CUDA implementation, run on the cuda-sim device (the
// CUDA kernels' code through the host launch layer), against the CPU loops on the same inputs.
// The element math is shared, so elementwise results and the optimizer updates must be bitwise
// equal; the reductions (sum of squares, LAMB's norms) sum in another order, so they are
// compared to 1e-12 relative (doubles over ≤ 70,001 squares) and LAMB's weights to 1e-6.
// Sizes cover the vector tail (n mod 4), one element, several blocks and more than one
// multi-tensor chunk (65,536 elements). The sim device must refuse host pointers, as a GPU would.
#include "kernels/cuda/sim/sim_kernels.h"
#include "kernels/device_math.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace dscpp;
using kernels::DeviceMath;

namespace {

const int64_t kSizes[] = {1, 7, 4099, 70001};

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// One array on the sim device, filled from and read back to host vectors of raw bytes.
struct SimArray {
  SimArray(SimCudaDevice& dev, const void* host, size_t bytes)
      : dev(dev), buf(dev, bytes == 0 ? 1 : bytes, MemCategory::buffers), bytes(bytes) {
    if (bytes) dev.copy_from_host(buf.data(), host, bytes);
  }
  template <class T>
  std::vector<T> read() const {
    std::vector<T> out(bytes / sizeof(T));
    if (bytes) dev.copy_to_host(out.data(), buf.data(), bytes);
    return out;
  }
  template <class T>
  T* as() const {
    return buf.as<T>();
  }
  SimCudaDevice& dev;
  DeviceBuffer buf;
  size_t bytes;
};

template <class T>
SimArray put(SimCudaDevice& dev, const std::vector<T>& v) {
  return SimArray(dev, v.data(), v.size() * sizeof(T));
}

std::vector<uint16_t> to_storage(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> out(x.size());
  kernels::cpu_math().store_from_f32(out.data(), t, x.data(), static_cast<int64_t>(x.size()));
  return out;
}

}  // namespace

TEST_CASE("cuda-sim DeviceMath: casts, accumulation and scaling equal the CPU loops bit for bit") {
  auto dev = make_sim_cuda_device();
  DeviceMath& gpu = kernels::math_of(*dev);
  DeviceMath& cpu = kernels::cpu_math();
  REQUIRE(&gpu != &cpu);
  for (int64_t n : kSizes) {
    CAPTURE(n);
    const std::vector<float> a = random_floats(n, 1), b = random_floats(n, 2, 1e-3f);
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      CAPTURE(dtype_name(t));
      const size_t elem = dtype_size(t);
      std::vector<unsigned char> host(static_cast<size_t>(n) * elem);
      cpu.store_from_f32(host.data(), t, a.data(), n);
      SimArray d = SimArray(*dev, host.data(), host.size());
      SimArray bd = put(*dev, b);

      cpu.accumulate_into(host.data(), t, b.data(), n);
      gpu.accumulate_into(d.as<void>(), t, bd.as<float>(), n);
      CHECK(d.read<unsigned char>() == host);

      cpu.scale_inplace(host.data(), t, 0.37f, n);
      gpu.scale_inplace(d.as<void>(), t, 0.37f, n);
      CHECK(d.read<unsigned char>() == host);

      std::vector<float> wide(static_cast<size_t>(n));
      SimArray wd = put(*dev, wide);
      cpu.load_to_f32(host.data(), t, wide.data(), 1.0f / 1024.0f, n);
      gpu.load_to_f32(d.as<void>(), t, wd.as<float>(), 1.0f / 1024.0f, n);
      CHECK(wd.read<float>() == wide);

      // add_into and convert_into across dtypes (bf16 source into t).
      const std::vector<uint16_t> src16 = to_storage(b, DType::bf16);
      SimArray sd = put(*dev, src16);
      cpu.add_into(host.data(), t, src16.data(), DType::bf16, n);
      gpu.add_into(d.as<void>(), t, sd.as<void>(), DType::bf16, n);
      CHECK(d.read<unsigned char>() == host);
      cpu.convert_into(host.data(), t, src16.data(), DType::bf16, n);
      gpu.convert_into(d.as<void>(), t, sd.as<void>(), DType::bf16, n);
      CHECK(d.read<unsigned char>() == host);

      CHECK(gpu.any_nonfinite(d.as<void>(), t, n) == false);
      CHECK(gpu.sum_squares(d.as<void>(), t, n) ==
            Approx(cpu.sum_squares(host.data(), t, n)).epsilon(1e-12));
    }
    // A NaN or inf anywhere, the last element included (the vector tail).
    std::vector<float> bad = a;
    bad.back() = std::numeric_limits<float>::infinity();
    SimArray bd = put(*dev, bad);
    CHECK(gpu.any_nonfinite(bd.as<void>(), DType::f32, n));
    std::vector<float> filled(static_cast<size_t>(n), 0.0f);
    SimArray fd = put(*dev, filled);
    gpu.fill(fd.as<float>(), 0.25f, n);
    CHECK(fd.read<float>() == std::vector<float>(static_cast<size_t>(n), 0.25f));
  }
}

TEST_CASE("cuda-sim DeviceMath: optimizer updates equal the CPU loops (LAMB to 1e-6)") {
  auto dev = make_sim_cuda_device();
  DeviceMath& gpu = kernels::math_of(*dev);
  DeviceMath& cpu = kernels::cpu_math();
  for (int64_t n : kSizes) {
    CAPTURE(n);
    const std::vector<float> w0 = random_floats(n, 3), g = random_floats(n, 4, 0.1f);
    const std::vector<float> s0 = random_floats(n, 5, 0.01f);
    std::vector<float> v0 = random_floats(n, 6, 0.01f);
    for (float& x : v0) x = x * x;  // second moments are ≥ 0
    for (int rule = 0; rule < 5; ++rule) {
      CAPTURE(rule);
      std::vector<float> w = w0, m = s0, v = v0;
      SimArray wd = put(*dev, w), gd = put(*dev, g), md = put(*dev, m), vd = put(*dev, v);
      if (rule == 0) {
        const auto c = kernels::adam_coeffs(1e-3, 0.9, 0.999, 1e-8, 0.01, true, true, 3);
        cpu.adam_step(w.data(), g.data(), m.data(), v.data(), n, c);
        gpu.adam_step(wd.as<float>(), gd.as<float>(), md.as<float>(), vd.as<float>(), n, c);
      } else if (rule == 1) {
        const auto c = kernels::sgd_coeffs(1e-2, 0.9, 0.0, 1e-3, true, false, false);
        cpu.sgd_step(w.data(), g.data(), m.data(), n, c);
        gpu.sgd_step(wd.as<float>(), gd.as<float>(), md.as<float>(), n, c);
      } else if (rule == 2) {
        const auto c = kernels::adagrad_coeffs(1e-2, 0.0, 1e-10, 0.0, false, 2);
        cpu.adagrad_step(w.data(), g.data(), v.data(), n, c);
        gpu.adagrad_step(wd.as<float>(), gd.as<float>(), vd.as<float>(), n, c);
      } else if (rule == 3) {
        const auto c = kernels::lion_coeffs(1e-4, 0.9, 0.99, 0.1);
        cpu.lion_step(w.data(), g.data(), m.data(), n, c);
        gpu.lion_step(wd.as<float>(), gd.as<float>(), md.as<float>(), n, c);
      } else {
        const auto c = kernels::lamb_coeffs(0.9, 0.999, 1e-6, 0.01, false);
        const double step = kernels::lamb_step_size(1e-3, 0.9, 0.999, true, 2);
        const std::vector<int64_t> bounds = n > 3 ? std::vector<int64_t>{0, n / 3, n} : std::vector<int64_t>{0, n};
        cpu.lamb_step(w.data(), g.data(), m.data(), v.data(), bounds, c, step, 0.01, 10.0);
        gpu.lamb_step(wd.as<float>(), gd.as<float>(), md.as<float>(), vd.as<float>(), bounds, c, step, 0.01, 10.0);
        const std::vector<float> got = wd.read<float>();
        for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(w[i]).epsilon(1e-6).margin(1e-9));
        CHECK(md.read<float>() == m);  // the moments use no reduction: bitwise
        continue;
      }
      CHECK(wd.read<float>() == w);
      CHECK(md.read<float>() == m);
      CHECK(vd.read<float>() == v);
      CHECK(w != w0);  // the update did something
    }
  }
}

TEST_CASE("cuda-sim DeviceMath: int8 quantization equals the CPU loops, 16-bit parameters staged") {
  auto dev = make_sim_cuda_device();
  DeviceMath& gpu = kernels::math_of(*dev);
  DeviceMath& cpu = kernels::cpu_math();
  const int64_t n = 12 * 1000, groups = 12;
  const std::vector<float> x = random_floats(n, 7);
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(t));
    std::vector<unsigned char> xs(static_cast<size_t>(n) * dtype_size(t));
    cpu.store_from_f32(xs.data(), t, x.data(), n);
    SimArray xd(*dev, xs.data(), xs.size());
    std::vector<int8_t> q(static_cast<size_t>(n));
    std::vector<float> s(static_cast<size_t>(groups));
    SimArray qd = put(*dev, q), sd = put(*dev, s);
    cpu.quantize_int8_groups(xs.data(), t, n, groups, q.data(), s.data());
    gpu.quantize_int8_groups(xd.as<void>(), t, n, groups, qd.as<int8_t>(), sd.as<float>());
    CHECK(qd.read<int8_t>() == q);
    CHECK(sd.read<float>() == s);
    cpu.dequantize_int8_groups(q.data(), s.data(), n, groups, xs.data(), t);
    gpu.dequantize_int8_groups(qd.as<int8_t>(), sd.as<float>(), n, groups, xd.as<void>(), t);
    CHECK(xd.read<unsigned char>() == xs);
  }
}

TEST_CASE("cuda-sim DeviceMath: qgZ's int4 quantizer equals the CPU loops") {
  auto dev = make_sim_cuda_device();
  DeviceMath& gpu = kernels::math_of(*dev);
  DeviceMath& cpu = kernels::cpu_math();
  const int64_t n = 256 * 9, group = 256;
  const std::vector<float> x = random_floats(n, 8);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    std::vector<unsigned char> xs(static_cast<size_t>(n) * dtype_size(t));
    cpu.store_from_f32(xs.data(), t, x.data(), n);
    SimArray xd(*dev, xs.data(), xs.size());
    std::vector<uint8_t> q(static_cast<size_t>(n / 2));
    std::vector<float> s(static_cast<size_t>(n / group)), acc = random_floats(n, 9);
    SimArray qd = put(*dev, q), sd = put(*dev, s), ad = put(*dev, acc);
    cpu.quantize_int4_groups(xs.data(), t, n, group, q.data(), s.data());
    gpu.quantize_int4_groups(xd.as<void>(), t, n, group, qd.as<uint8_t>(), sd.as<float>());
    CHECK(qd.read<uint8_t>() == q);
    CHECK(sd.read<float>() == s);
    cpu.dequantize_int4_add(q.data(), s.data(), n, group, acc.data());
    gpu.dequantize_int4_add(qd.as<uint8_t>(), sd.as<float>(), n, group, ad.as<float>());
    CHECK(ad.read<float>() == acc);
  }
}

TEST_CASE("cuda-sim refuses host memory where a GPU needs device memory") {
  auto dev = make_sim_cuda_device();
  DeviceMath& gpu = kernels::math_of(*dev);
  std::vector<float> host(64, 1.0f);
  SimArray d = put(*dev, host);
  CHECK_THROWS_WITH(gpu.scale_inplace(host.data(), DType::f32, 2.0f, 64),
                    Catch::Contains("scale_inplace") && Catch::Contains("not memory of this device"));
  CHECK_THROWS_WITH(gpu.accumulate_into(d.as<void>(), DType::f32, host.data(), 64),
                    Catch::Contains("accumulate_into"));
  // One element past the end of an allocation is outside it too.
  CHECK_THROWS_WITH(gpu.fill(d.as<float>(), 0.0f, 65), Catch::Contains("fill"));
  CHECK_THROWS_WITH(dev->copy_to_host(d.as<float>(), d.as<float>(), 4), Catch::Contains("expected host memory"));
  CHECK_THROWS_WITH(dev->copy_from_host(host.data(), host.data(), 4), Catch::Contains("not memory of this device"));
  CHECK_NOTHROW(gpu.fill(d.as<float>(), 0.0f, 64));
  CHECK_NOTHROW(gpu.scale_inplace(host.data(), DType::f32, 2.0f, 0));  // nothing touched, nothing checked
}

TEST_CASE("math_of: bound math, else the CPU loops for host memory") {
  auto cpu_dev = make_cpu_device();
  CHECK(&kernels::math_of(*cpu_dev) == &kernels::cpu_math());
  auto sim = make_sim_cuda_device();
  CHECK(kernels::math_of(*sim).name() == "cuda-sim");
}
