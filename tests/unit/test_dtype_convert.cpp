// Bulk `convert` between dtypes and the dtype names (core/dtype.h), against the bit-level
// references of dtype_refs.h.
#include "core/dtype.h"
#include "core/error.h"
#include "tests/unit/dtype_refs.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dtype_test;

// ---- convert ----------------------------------------------------------------------------

namespace {

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    const uint64_t r = rng();
    std::memcpy(&x, &r, sizeof(T));
  }
  return v;
}

}  // namespace

TEST_CASE("convert: the bulk loop equals the scalar conversions at every length", "[dtype][convert]") {
  using dscpp::DType;
  // Lengths around the 64-element blocks of the vectorised loop, and empty.
  for (const size_t n : {0, 1, 3, 63, 64, 65, 127, 1000, 4099}) {
    CAPTURE(n);
    const auto f32 = random_values<uint32_t>(n, 1);
    const auto u16 = random_values<uint16_t>(n, 2);
    std::vector<uint16_t> out16(n + 1, 0xabcd);  // one guard element past the end
    std::vector<uint32_t> out32(n + 1, 0xabcdef01u);
    Mismatches m;
    const auto compare = [&](const char* what, auto got, auto want, size_t i, uint32_t in) {
      if (got != want)
        m.add(fmt::format("{} [{}] {} -> {}, scalar {}", what, i, hex(in, 8), hex(got, 8), hex(want, 8)));
    };
    dscpp::convert(f32.data(), DType::f32, out16.data(), DType::f16, n);
    for (size_t i = 0; i < n; ++i) compare("f32->f16", out16[i], float_to_fp16_bits(float_of(f32[i])), i, f32[i]);
    dscpp::convert(f32.data(), DType::f32, out16.data(), DType::bf16, n);
    for (size_t i = 0; i < n; ++i) compare("f32->bf16", out16[i], float_to_bf16_bits(float_of(f32[i])), i, f32[i]);
    dscpp::convert(u16.data(), DType::f16, out32.data(), DType::f32, n);
    for (size_t i = 0; i < n; ++i) compare("f16->f32", out32[i], bits_of(fp16_bits_to_float(u16[i])), i, u16[i]);
    dscpp::convert(u16.data(), DType::bf16, out32.data(), DType::f32, n);
    for (size_t i = 0; i < n; ++i) compare("bf16->f32", out32[i], bits_of(bf16_bits_to_float(u16[i])), i, u16[i]);
    dscpp::convert(u16.data(), DType::f16, out16.data(), DType::bf16, n);
    for (size_t i = 0; i < n; ++i)
      compare("f16->bf16", out16[i], ref_encode_float(fp16_bits_to_float(u16[i]), bf16_format), i, u16[i]);
    dscpp::convert(u16.data(), DType::bf16, out16.data(), DType::f16, n);
    for (size_t i = 0; i < n; ++i)
      compare("bf16->f16", out16[i], ref_encode_float(bf16_bits_to_float(u16[i]), fp16_format), i, u16[i]);
    dscpp::convert(u16.data(), DType::f16, out16.data(), DType::f16, n);  // a copy
    for (size_t i = 0; i < n; ++i) compare("f16->f16", out16[i], u16[i], i, u16[i]);
    REQUIRE_NONE(m);
    CHECK(out16[n] == 0xabcd);
    CHECK(out32[n] == 0xabcdef01u);
  }
}

TEST_CASE("convert: the dispatched fp16 path equals the scalar one on every pattern", "[dtype][convert]") {
  using dscpp::DType;
  CAPTURE(dscpp::cpu_has_f16c());
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  std::vector<uint16_t> narrow(all.size());
  dscpp::convert(all.data(), DType::f16, wide.data(), DType::f32, all.size());
  dscpp::convert(wide.data(), DType::f32, narrow.data(), DType::f16, wide.size());
  Mismatches m;
  for (size_t i = 0; i < all.size(); ++i) {
    if (bits_of(wide[i]) != bits_of(fp16_bits_to_float(all[i])))
      m.add(fmt::format("f16->f32 {} -> {}", hex(all[i], 4), hex(bits_of(wide[i]), 8)));
    if (narrow[i] != float_to_fp16_bits(wide[i]))
      m.add(fmt::format("f32->f16 {} -> {}", hex(bits_of(wide[i]), 8), hex(narrow[i], 4)));
  }
  REQUIRE_NONE(m);
}

TEST_CASE("convert: fp32 -> fp16/bf16 -> fp32 round trips representable values", "[dtype][convert]") {
  using dscpp::DType;
  std::vector<float> values;
  for (uint32_t h = 0; h <= 0xffff; ++h)
    if (!ref_is_nan(h, fp16_format)) values.push_back(float_of(ref_decode(h, fp16_format)));
  std::vector<uint16_t> half(values.size());
  std::vector<float> back(values.size());
  dscpp::convert(values.data(), DType::f32, half.data(), DType::f16, values.size());
  dscpp::convert(half.data(), DType::f16, back.data(), DType::f32, values.size());
  Mismatches m;
  for (size_t i = 0; i < values.size(); ++i)
    if (bits_of(back[i]) != bits_of(values[i]))
      m.add(fmt::format("{} -> {} -> {}", hex(bits_of(values[i]), 8), hex(half[i], 4), hex(bits_of(back[i]), 8)));
  REQUIRE_NONE(m);
}

TEST_CASE("convert: fp64 -> fp16/bf16 rounds once, not via fp32", "[dtype][convert]") {
  using dscpp::DType;
  // Just above and below every tie by far less than a float ulp: a double -> float -> half
  // path would first round onto the tie and then break it toward even, which is wrong.
  for (const Format f : {fp16_format, bf16_format}) {
    const DType type = f.man_bits == 10 ? DType::f16 : DType::bf16;
    CAPTURE(dscpp::dtype_name(type));
    std::vector<double> inputs;
    for (uint32_t lo = 0; lo + 1 < f.inf(); ++lo) {
      const double mid = (ref_value(lo, f) + ref_value(lo + 1, f)) / 2;
      for (const double x : {mid * (1 + 0x1p-40), mid * (1 - 0x1p-40), -mid * (1 + 0x1p-40)}) inputs.push_back(x);
    }
    // Beyond float: huge (overflow to Inf) and tiny (below every subnormal) doubles.
    for (const double x : {1e300, -1e300, 1e-300, -1e-300, 0x1p-200, 3e38 * 1.2}) inputs.push_back(x);
    std::vector<uint16_t> out(inputs.size());
    dscpp::convert(inputs.data(), DType::f64, out.data(), type, inputs.size());
    Mismatches m;
    size_t naive_wrong = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const uint32_t want = ref_encode(inputs[i], f);
      if (out[i] != want) m.add(fmt::format("{:a} -> {}, IEEE {}", inputs[i], hex(out[i], 4), hex(want, 4)));
      if (std::fabs(inputs[i]) <= std::numeric_limits<float>::max())  // else float is Inf
        naive_wrong += ref_encode(static_cast<float>(inputs[i]), f) != want;
    }
    REQUIRE_NONE(m);
    CHECK(naive_wrong > 0);  // the inputs really do distinguish single from double rounding
  }
}

TEST_CASE("convert: other fp64 pairs are exact or rounded once", "[dtype][convert]") {
  using dscpp::DType;
  // Rounding to float, checked with the same IEEE encoder (float is {8, 23}).
  const std::vector<double> d = {1.0, -0.0, 0x1.fffffffp0, 1e-40, 0x1.000001p-140, 1e39, -INFINITY};
  std::vector<float> f(d.size());
  dscpp::convert(d.data(), DType::f64, f.data(), DType::f32, d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    CAPTURE(d[i]);
    CHECK(bits_of(f[i]) == ref_encode(d[i], Format{8, 23}));
  }
  const std::vector<uint16_t> h = {0x0001, 0x3c00, 0xfbff, 0x7c00};
  std::vector<double> back(h.size());
  dscpp::convert(h.data(), DType::f16, back.data(), DType::f64, h.size());
  for (size_t i = 0; i < h.size(); ++i) CHECK(back[i] == ref_value(h[i], fp16_format));
  dscpp::convert(h.data(), DType::bf16, back.data(), DType::f64, h.size());
  for (size_t i = 0; i < h.size(); ++i) CHECK(back[i] == ref_value(h[i], bf16_format));
}

TEST_CASE("convert: unsupported pairs throw naming both types", "[dtype][convert]") {
  using Catch::Matchers::Contains;
  using dscpp::DType;
  float src[2] = {1, 2};
  int8_t dst[2] = {};
  REQUIRE_THROWS_AS(dscpp::convert(src, DType::f32, dst, DType::i8, 2), dscpp::Error);
  REQUIRE_THROWS_WITH(dscpp::convert(src, DType::f32, dst, DType::i8, 2), Contains("fp32") && Contains("int8"));
  REQUIRE_THROWS_WITH(dscpp::convert(dst, DType::i8, src, DType::bf16, 0),  // even when empty
                      Contains("int8") && Contains("bf16"));
  REQUIRE_THROWS_WITH(dscpp::convert(src, DType::i32, dst, DType::i64, 1), Contains("int32") && Contains("int64"));
  int8_t copy[2] = {};
  dscpp::convert(dst, DType::i8, copy, DType::i8, 2);  // a type to itself is a copy
}

// ---- names and sizes --------------------------------------------------------------------

TEST_CASE("parse_dtype accepts DeepSpeed's spellings", "[dtype]") {
  using dscpp::DType;
  const std::pair<const char*, DType> accepted[] = {
      {"torch.float16", DType::f16},   {"fp16", DType::f16},  {"float16", DType::f16},       {"half", DType::f16},
      {"torch.float32", DType::f32},   {"fp32", DType::f32},  {"float32", DType::f32},       {"float", DType::f32},
      {"torch.bfloat16", DType::bf16}, {"bf16", DType::bf16}, {"bfloat16", DType::bf16},     {"bfloat", DType::bf16},
      {"torch.int8", DType::i8},       {"int8", DType::i8},   {"torch.float64", DType::f64}, {"fp64", DType::f64},
      {"double", DType::f64},          {"uint8", DType::u8},  {"torch.int32", DType::i32},   {"int32", DType::i32},
      {"torch.int64", DType::i64},     {"int64", DType::i64}, {"torch.half", DType::f16},    {"torch.long", DType::i64},
  };
  for (const auto& [name, type] : accepted) {
    CAPTURE(name);
    CHECK(dscpp::parse_dtype(name) == type);
  }
  for (const char* rejected : {"", "FP16", "fp 16", "torch.float16 ", "float8", "torch.bf16", "fp8", "int4"}) {
    CAPTURE(rejected);
    CHECK_FALSE(dscpp::parse_dtype(rejected).has_value());
  }
}

TEST_CASE("dtype names round-trip and sizes are right", "[dtype]") {
  using dscpp::DType;
  const std::pair<DType, size_t> all[] = {{DType::f32, 4}, {DType::f16, 2}, {DType::bf16, 2}, {DType::f64, 8},
                                          {DType::i8, 1},  {DType::u8, 1},  {DType::i32, 4},  {DType::i64, 8}};
  for (const auto& [type, size] : all) {
    CAPTURE(dscpp::dtype_name(type));
    CHECK(dscpp::dtype_size(type) == size);
    CHECK(dscpp::parse_dtype(dscpp::dtype_name(type)) == type);
  }
  CHECK(dscpp::dtype_name(DType::bf16) == "bf16");
  CHECK(dscpp::dtype_name(DType::u8) == "uint8");
  STATIC_REQUIRE(dscpp::dtype_size(DType::bf16) == 2);
  CHECK_THROWS_AS(dscpp::dtype_name(static_cast<DType>(200)), dscpp::InternalError);
}
