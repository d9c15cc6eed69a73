#include "runtime/model/init.h"

#include "core/error.h"
#include "core/thread_pool.h"

#include <cmath>

namespace dscpp::runtime {
namespace {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t param_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return splitmix64(seed ^ splitmix64(h));
}

// Uniform in (0, 1) with 53 random bits, never exactly 0 (log() below).
double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

float value(uint64_t key, int64_t index, dscpp_init_kind kind, float a) {
  switch (kind) {
    case DSCPP_INIT_ZEROS:
      return 0.0f;
    case DSCPP_INIT_ONES:
      return 1.0f;
    case DSCPP_INIT_CONSTANT:
      return a;
    case DSCPP_INIT_UNIFORM: {
      double u = unit(splitmix64(key + 2 * static_cast<uint64_t>(index)));
      return static_cast<float>((2.0 * u - 1.0) * a);
    }
    case DSCPP_INIT_NORMAL: {
      double u1 = unit(splitmix64(key + 2 * static_cast<uint64_t>(index)));
      double u2 = unit(splitmix64(key + 2 * static_cast<uint64_t>(index) + 1));
      return static_cast<float>(a * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
  }
  fail("unknown parameter init rule {}", static_cast<int>(kind));
}

}  // namespace

float init_value(uint64_t seed, std::string_view param_name, int64_t index, dscpp_init_kind kind, float a) {
  return value(param_key(seed, param_name), index, kind, a);
}

void init_range(uint64_t seed, std::string_view param_name, dscpp_init_kind kind, float a, int64_t first,
                int64_t count, float* dst) {
  uint64_t key = param_key(seed, param_name);
  value(key, 0, kind, a);  // rejects an unknown kind before going parallel
  parallel_for(count, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = value(key, first + i, kind, a);
  });
}

}  // namespace dscpp::runtime
