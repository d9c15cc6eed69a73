// Bulk dtype conversion throughput: dscpp's portable conversions (core/half.h, shared with
// CUDA) against two baselines measured in the same run — memcpy of the same bytes (the
// memory-bound ceiling of a single pass) and, for fp16, the CPU's F16C instructions.
//   bench_convert [MiB of fp32 input, default 64]
#include "core/dtype.h"

#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

template <typename F>
double best_seconds(F fn) {
  double best = 1e30;
  for (int i = 0; i < 7; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

__attribute__((target("f16c,avx"))) void f16c_to_half(const float* src, std::uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c,avx"))) void f16c_to_float(const std::uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

int main(int argc, char** argv) {
  using dscpp::DType;
  size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  size_t n = mib * 1024 * 1024 / sizeof(float);
  std::vector<float> f32(n), back(n);
  std::vector<std::uint16_t> h16(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (auto& x : f32) x = dist(rng);

  // Bytes moved by one conversion pass: read 4, write 2 (or read 2, write 4).
  const double bytes = static_cast<double>(n) * 6;
  double copy = best_seconds([&] {
    std::memcpy(h16.data(), f32.data(), n * 2);
    std::memcpy(back.data(), f32.data(), n * 4);
  });
  auto gbs = [&](double s) { return bytes / s / 1e9; };
  std::printf("%zu MiB fp32 (%zu elements); GB/s counts bytes read + written\n", mib, n);
  std::printf("%-26s %8.2f GB/s\n", "baseline memcpy (6 B/elem)", gbs(copy));

  struct Case {
    const char* name;
    DType from, to;
  };
  for (Case c : {Case{"fp32->fp16", DType::f32, DType::f16}, Case{"fp16->fp32", DType::f16, DType::f32},
                 Case{"fp32->bf16", DType::f32, DType::bf16}, Case{"bf16->fp32", DType::bf16, DType::f32}}) {
    const void* src = c.from == DType::f32 ? static_cast<const void*>(f32.data()) : h16.data();
    void* dst = c.to == DType::f32 ? static_cast<void*>(back.data()) : h16.data();
    double s = best_seconds([&] { dscpp::convert(src, c.from, dst, c.to, n); });
    std::printf("%-26s %8.2f GB/s  %5.2fx memcpy", c.name, gbs(s), copy / s);
    if (__builtin_cpu_supports("f16c") && c.from != DType::bf16 && c.to != DType::bf16) {
      double hw = c.to == DType::f16 ? best_seconds([&] { f16c_to_half(f32.data(), h16.data(), n); })
                                     : best_seconds([&] { f16c_to_float(h16.data(), back.data(), n); });
      std::printf("  %5.2fx F16C (%.2f GB/s)", hw / s, gbs(hw));
    }
    std::printf("\n");
  }
  return 0;
}
