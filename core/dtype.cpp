#include "core/dtype.h"

#include "core/error.h"
#include "core/half.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace dscpp {

void invalid_dtype(int value) {
  check_failed(__FILE__, __LINE__, fmt::format("invalid DType value {}", value));
}

std::string_view dtype_name(DType type) {
  switch (type) {
    case DType::f32:
      return "fp32";
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "fp64";
    case DType::i8:
      return "int8";
    case DType::u8:
      return "uint8";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
  }
  invalid_dtype(static_cast<int>(type));
}

std::optional<DType> parse_dtype(std::string_view name) {
  struct Spelling {
    std::string_view name;
    DType type;
  };
  static constexpr Spelling spellings[] = {
      {"torch.float16", DType::f16},
      {"fp16", DType::f16},
      {"float16", DType::f16},
      {"half", DType::f16},
      {"torch.half", DType::f16},
      {"torch.float32", DType::f32},
      {"fp32", DType::f32},
      {"float32", DType::f32},
      {"float", DType::f32},
      {"torch.float", DType::f32},
      {"torch.bfloat16", DType::bf16},
      {"bf16", DType::bf16},
      {"bfloat16", DType::bf16},
      {"bfloat", DType::bf16},
      {"torch.float64", DType::f64},
      {"fp64", DType::f64},
      {"float64", DType::f64},
      {"double", DType::f64},
      {"torch.double", DType::f64},
      {"torch.int8", DType::i8},
      {"int8", DType::i8},
      {"torch.uint8", DType::u8},
      {"uint8", DType::u8},
      {"torch.int32", DType::i32},
      {"int32", DType::i32},
      {"int", DType::i32},
      {"torch.int", DType::i32},
      {"torch.int64", DType::i64},
      {"int64", DType::i64},
      {"long", DType::i64},
      {"torch.long", DType::i64},
  };
  for (const Spelling& s : spellings)
    if (s.name == name) return s.type;
  return std::nullopt;
}

namespace {

// Narrows a double to float rounding toward zero and ORs "inexact" into the last bit (round
// to odd). Float keeps at least 13 more bits than fp16 or bf16 at every magnitude, more than
// the 2 that round-to-odd needs, so rounding this float to nearest-even gives the same result
// as rounding the double directly; plain (float)d would round twice and could land on the
// wrong side of an fp16 tie.
inline float narrow_round_to_odd(double d) {
  // NaN keeps its sign and top payload bits, Inf stays Inf.
  if (std::isnan(d) || std::isinf(d)) return static_cast<float>(d);
  // Beyond the float range, truncation gives +-FLT_MAX (odd already); clamping first also
  // keeps the narrowing below in range.
  constexpr double float_max = std::numeric_limits<float>::max();
  const float nearest = static_cast<float>(std::clamp(d, -float_max, float_max));
  uint32_t bits = std::bit_cast<uint32_t>(nearest);
  // Rounded away from zero: take the neighbour toward zero. Float bit patterns are
  // sign-magnitude, so that is bits - 1 for either sign.
  if (std::fabs(static_cast<double>(nearest)) > std::fabs(d)) bits -= 1;
  if (static_cast<double>(std::bit_cast<float>(bits)) != d) bits |= 1u;
  return std::bit_cast<float>(bits);
}

// GCC's -O2 vectoriser (cost model "very-cheap") only vectorises a loop whose trip count it
// knows, so the bulk of the work runs in fixed-size blocks and only the tail is scalar.
// `__restrict` states the documented no-overlap contract, which spares runtime alias checks.
constexpr size_t block = 64;

template <typename Src, typename Dst, typename Op>
void convert_loop(const void* src_v, void* dst_v, size_t n, Op op) {
  const Src* __restrict src = static_cast<const Src*>(src_v);
  Dst* __restrict dst = static_cast<Dst*>(dst_v);
  size_t i = 0;
  for (; i + block <= n; i += block)
    for (size_t j = 0; j < block; ++j) dst[i + j] = op(src[i + j]);
  for (; i < n; ++i) dst[i] = op(src[i]);
}

// The F16C instructions round to nearest-even and keep NaN payloads exactly as
// float_to_fp16_bits does (test_dtype checks every pattern against them), and run 5-7x
// faster than the portable loop (bench_convert); used when the CPU has them.
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = float_to_fp16_bits(src[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = fp16_bits_to_float(src[i]);
}

// A pair key for the switch below.
constexpr int pair(DType from, DType to) {
  return static_cast<int>(from) * 16 + static_cast<int>(to);
}

}  // namespace

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    if (n != 0) std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  using u16 = uint16_t;
  switch (pair(src_type, dst_type)) {
    case pair(DType::f32, DType::f16):
      if (cpu_has_f16c()) return f32_to_f16_f16c(static_cast<const float*>(src), static_cast<u16*>(dst), n);
      return convert_loop<float, u16>(src, dst, n, [](float x) { return float_to_fp16_bits(x); });
    case pair(DType::f32, DType::bf16):
      return convert_loop<float, u16>(src, dst, n, [](float x) { return float_to_bf16_bits(x); });
    case pair(DType::f16, DType::f32):
      if (cpu_has_f16c()) return f16_to_f32_f16c(static_cast<const u16*>(src), static_cast<float*>(dst), n);
      return convert_loop<u16, float>(src, dst, n, [](u16 h) { return fp16_bits_to_float(h); });
    case pair(DType::bf16, DType::f32):
      return convert_loop<u16, float>(src, dst, n, [](u16 h) { return bf16_bits_to_float(h); });
    // fp16 <-> bf16 go through float, which holds every value of both exactly: one rounding.
    case pair(DType::f16, DType::bf16):
      return convert_loop<u16, u16>(src, dst, n, [](u16 h) { return float_to_bf16_bits(fp16_bits_to_float(h)); });
    case pair(DType::bf16, DType::f16):
      return convert_loop<u16, u16>(src, dst, n, [](u16 h) { return float_to_fp16_bits(bf16_bits_to_float(h)); });
    case pair(DType::f32, DType::f64):
      return convert_loop<float, double>(src, dst, n, [](float x) { return static_cast<double>(x); });
    case pair(DType::f64, DType::f32):
      return convert_loop<double, float>(src, dst, n, [](double x) { return static_cast<float>(x); });
    case pair(DType::f16, DType::f64):
      return convert_loop<u16, double>(src, dst, n, [](u16 h) { return static_cast<double>(fp16_bits_to_float(h)); });
    case pair(DType::bf16, DType::f64):
      return convert_loop<u16, double>(src, dst, n, [](u16 h) { return static_cast<double>(bf16_bits_to_float(h)); });
    case pair(DType::f64, DType::f16):
      return convert_loop<double, u16>(src, dst, n,
                                       [](double x) { return float_to_fp16_bits(narrow_round_to_odd(x)); });
    case pair(DType::f64, DType::bf16):
      return convert_loop<double, u16>(src, dst, n,
                                       [](double x) { return float_to_bf16_bits(narrow_round_to_odd(x)); });
    default:
      break;
  }
  fail(
      "convert: no conversion from {} to {} (supported: between fp32, fp16, bf16 and fp64, "
      "or a type to itself)",
      dtype_name(src_type), dtype_name(dst_type));
}

}  // namespace dscpp
