// fp16/bf16 conversions (core/half.h); test_dtype_convert.cpp has bulk `convert` and the dtype
// names (core/dtype.h).
//
// Every result is compared bit for bit with references that share no code with the
// implementation:
//   * x86 hardware when the CPU has it: F16C (VCVTPH2PS, VCVTPS2PH with an explicit
//     round-to-nearest-even immediate) for fp16, AVX512-BF16 (VCVTNEPS2BF16) for float -> bf16;
//   * decoders and an encoder written from the IEEE-754 definitions in double arithmetic
//     (ldexp, frexp, nearbyint), parameterised only by the exponent and mantissa widths.
// Each check counts mismatches and REQUIREs the count to be 0, printing the first few bit
// patterns in hex, so 65536-pattern sweeps stay fast and a failure stays readable.
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "tests/unit/dtype_refs.h"

#include <catch2/catch.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSCPP_TEST_X86 1
#else
#define DSCPP_TEST_X86 0
#endif

using namespace dtype_test;

namespace {

// ---- hardware references ----------------------------------------------------------------

#if DSCPP_TEST_X86
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t f16c_from_float(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
// VCVTNEPS2BF16 always rounds to nearest-even but flushes denormal inputs to zero, so it is a
// reference only for normal, Inf and NaN inputs.
__attribute__((target("avx512bf16,avx512vl"))) uint16_t avx512_bf16_from_float(float f) {
  const __m128bh r = _mm_cvtneps_pbh(_mm_set_ss(f));
  return static_cast<uint16_t>(_mm_extract_epi16(reinterpret_cast<const __m128i&>(r), 0));
}
bool have_f16c() {
  return __builtin_cpu_supports("f16c");
}
bool have_avx512_bf16() {
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl");
}
#else
float f16c_to_float(uint16_t) {
  return 0;
}
uint16_t f16c_from_float(float) {
  return 0;
}
uint16_t avx512_bf16_from_float(float) {
  return 0;
}
bool have_f16c() {
  return false;
}
bool have_avx512_bf16() {
  return false;
}
#endif

// Compares float -> fp16 for one input against every available reference.
struct Fp16EncodeCheck {
  bool f16c = have_f16c();
  Mismatches vs_ieee, vs_f16c;
  void operator()(float x) {
    const uint32_t got = float_to_fp16_bits(x);
    const uint32_t want = ref_encode_float(x, fp16_format);
    if (got != want)
      vs_ieee.add(fmt::format("{} -> {}, IEEE reference {}", hex(bits_of(x), 8), hex(got, 4), hex(want, 4)));
    if (f16c && got != f16c_from_float(x))
      vs_f16c.add(fmt::format("{} -> {}, F16C {}", hex(bits_of(x), 8), hex(got, 4), hex(f16c_from_float(x), 4)));
  }
};

struct Bf16EncodeCheck {
  bool hardware = have_avx512_bf16();
  Mismatches vs_ieee, vs_hardware;
  void operator()(float x) {
    const uint32_t got = float_to_bf16_bits(x);
    const uint32_t want = ref_encode_float(x, bf16_format);
    if (got != want)
      vs_ieee.add(fmt::format("{} -> {}, IEEE reference {}", hex(bits_of(x), 8), hex(got, 4), hex(want, 4)));
    if (hardware && std::fpclassify(x) != FP_SUBNORMAL && got != avx512_bf16_from_float(x))
      vs_hardware.add(
          fmt::format("{} -> {}, AVX512-BF16 {}", hex(bits_of(x), 8), hex(got, 4), hex(avx512_bf16_from_float(x), 4)));
  }
};

// Feeds the midpoint between every pair of adjacent finite values of `f` (both signs), and
// the floats just above and below it, to `check`; also checks the expected results, which
// follow from the construction: a tie goes to the even pattern, the neighbours to the nearer
// value. Past the largest finite value the next value is 2^(emax+1), which rounds to Inf.
template <typename Encode, typename Check>
Mismatches sweep_midpoints(Format f, Encode encode, Check& check) {
  Mismatches m;
  for (uint32_t lo = 0; lo < f.inf(); ++lo) {
    const uint32_t hi = lo + 1;
    const double lo_value = ref_value(lo, f);
    const double hi_value = hi == f.inf() ? std::ldexp(1.0, f.bias() + 1) : ref_value(hi, f);
    const double mid_value = (lo_value + hi_value) / 2;
    const auto mid = static_cast<float>(mid_value);
    if (static_cast<double>(mid) != mid_value) {  // one more bit than the format: must fit
      m.add(fmt::format("midpoint of {} and {} is not a float", hex(lo, 4), hex(hi, 4)));
      continue;
    }
    const uint32_t even = (lo & 1u) == 0 ? lo : hi;
    const struct {
      float x;
      uint32_t want;
    } probes[] = {{mid, even}, {std::nextafter(mid, INFINITY), hi}, {std::nextafter(mid, 0.0f), lo}};
    for (const auto& p : probes) {
      for (const bool negative : {false, true}) {
        const float x = negative ? -p.x : p.x;
        const uint32_t want = p.want | (negative ? f.sign_bit() : 0u);
        const uint32_t got = encode(x);
        if (got != want)
          m.add(fmt::format("{} -> {}, expected {} (between {} and {})", hex(bits_of(x), 8), hex(got, 4), hex(want, 4),
                            hex(lo, 4), hex(hi, 4)));
        check(x);
      }
    }
  }
  return m;
}

// 2n random float bit patterns: n uniform over all 2^32 (mostly huge or tiny; NaN, Inf and
// subnormals included) and n with the biased exponent confined to [lo_exp, hi_exp], so that
// most land where the format rounds rather than saturates.
template <typename Check>
void random_floats(uint32_t seed, size_t n, uint32_t lo_exp, uint32_t hi_exp, Check& check) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> exponent(lo_exp, hi_exp);
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<uint32_t>(rng());
    check(float_of(r));
    check(float_of((r & 0x807fffffu) | (exponent(rng) << 23)));
  }
}

}  // namespace

// ---- fp16 -------------------------------------------------------------------------------

TEST_CASE("fp16 -> float: all 65536 patterns match IEEE and F16C", "[dtype][fp16]") {
  const bool f16c = have_f16c();
  if (!f16c) WARN("no F16C on this CPU: checking against the IEEE reference only");
  Mismatches vs_ieee, vs_f16c;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint32_t got = bits_of(fp16_bits_to_float(static_cast<uint16_t>(h)));
    const uint32_t want = ref_decode(h, fp16_format);
    if (got != want) vs_ieee.add(fmt::format("{} -> {}, IEEE {}", hex(h, 4), hex(got, 8), hex(want, 8)));
    if (f16c && got != bits_of(f16c_to_float(static_cast<uint16_t>(h))))
      vs_f16c.add(fmt::format("{} -> {}, F16C {}", hex(h, 4), hex(got, 8),
                              hex(bits_of(f16c_to_float(static_cast<uint16_t>(h))), 8)));
  }
  REQUIRE_NONE(vs_ieee);
  REQUIRE_NONE(vs_f16c);
}

TEST_CASE("float -> fp16: every fp16 value round-trips, NaNs stay NaN", "[dtype][fp16]") {
  Fp16EncodeCheck check;
  Mismatches round_trip;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    // The exact value comes from the reference decoder, not from the code under test.
    const float x = float_of(ref_decode(h, fp16_format));
    const uint32_t got = float_to_fp16_bits(x);
    const uint32_t want = ref_is_nan(h, fp16_format) ? h | 0x0200u : h;  // NaN: quieted
    if (got != want) round_trip.add(fmt::format("{} -> {} -> {}", hex(h, 4), hex(bits_of(x), 8), hex(got, 4)));
    check(x);
  }
  REQUIRE_NONE(round_trip);
  REQUIRE_NONE(check.vs_ieee);
  REQUIRE_NONE(check.vs_f16c);
}

TEST_CASE("float -> fp16: ties to even at every midpoint, neighbours round correctly", "[dtype][fp16]") {
  Fp16EncodeCheck check;
  const Mismatches expected = sweep_midpoints(
      fp16_format, [](float x) { return uint32_t(float_to_fp16_bits(x)); }, check);
  REQUIRE_NONE(expected);
  REQUIRE_NONE(check.vs_ieee);
  REQUIRE_NONE(check.vs_f16c);

  CHECK(float_to_fp16_bits(65520.0f) == 0x7c00);  // tie between 65504 and 2^16: Inf
  CHECK(float_to_fp16_bits(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(float_to_fp16_bits(-65520.0f) == 0xfc00);
  CHECK(float_to_fp16_bits(65504.0f) == 0x7bff);
  CHECK(float_to_fp16_bits(0x1p-25f) == 0x0000);  // tie between 0 and the smallest subnormal
  CHECK(float_to_fp16_bits(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(float_to_fp16_bits(0x3p-25f) == 0x0002);  // tie between 1 and 2 (x 2^-24): even
  CHECK(float_to_fp16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(float_to_fp16_bits(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(float_to_fp16_bits(std::nextafter(0x1p-14f, 0.0f)) == 0x0400);  // rounds up to normal
  CHECK(float_to_fp16_bits(INFINITY) == 0x7c00);
  CHECK(float_to_fp16_bits(-INFINITY) == 0xfc00);
  CHECK(float_to_fp16_bits(float_of(0x7f800001u)) == 0x7e00);  // signalling NaN: quieted
  CHECK(float_to_fp16_bits(float_of(0xffc02000u)) == 0xfe01);  // sign and payload kept
}

TEST_CASE("float -> fp16: random floats match IEEE and F16C", "[dtype][fp16]") {
  Fp16EncodeCheck check;
  // Exponents 100..143 cover below the smallest subnormal (2^-24) to beyond 65504.
  random_floats(0x5eed16u, 1'500'000, 100, 143, check);
  REQUIRE_NONE(check.vs_ieee);
  REQUIRE_NONE(check.vs_f16c);
}

// ---- bf16 -------------------------------------------------------------------------------

TEST_CASE("bf16 -> float: all 65536 patterns match IEEE and the top-half rule", "[dtype][bf16]") {
  Mismatches vs_ieee, vs_shift;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint32_t got = bits_of(bf16_bits_to_float(static_cast<uint16_t>(h)));
    const uint32_t want = ref_decode(h, bf16_format);
    if (got != want) vs_ieee.add(fmt::format("{} -> {}, IEEE {}", hex(h, 4), hex(got, 8), hex(want, 8)));
    // bf16 is by definition the top half of a float; a NaN additionally gets the quiet bit.
    uint32_t top_half = h << 16;
    if (std::isnan(float_of(top_half))) top_half |= 0x00400000u;
    if (got != top_half) vs_shift.add(fmt::format("{} -> {}, top half {}", hex(h, 4), hex(got, 8), hex(top_half, 8)));
  }
  REQUIRE_NONE(vs_ieee);
  REQUIRE_NONE(vs_shift);
}

TEST_CASE("float -> bf16: every bf16 value round-trips, NaNs stay NaN", "[dtype][bf16]") {
  if (!have_avx512_bf16()) WARN("no AVX512-BF16 on this CPU: checking against IEEE only");
  Bf16EncodeCheck check;
  Mismatches round_trip;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float x = float_of(ref_decode(h, bf16_format));
    const uint32_t got = float_to_bf16_bits(x);
    const uint32_t want = ref_is_nan(h, bf16_format) ? h | 0x0040u : h;
    if (got != want) round_trip.add(fmt::format("{} -> {} -> {}", hex(h, 4), hex(bits_of(x), 8), hex(got, 4)));
    check(x);
  }
  REQUIRE_NONE(round_trip);
  REQUIRE_NONE(check.vs_ieee);
  REQUIRE_NONE(check.vs_hardware);
}

TEST_CASE("float -> bf16: ties to even at every midpoint, neighbours round correctly", "[dtype][bf16]") {
  Bf16EncodeCheck check;
  const Mismatches expected = sweep_midpoints(
      bf16_format, [](float x) { return uint32_t(float_to_bf16_bits(x)); }, check);
  REQUIRE_NONE(expected);
  REQUIRE_NONE(check.vs_ieee);
  REQUIRE_NONE(check.vs_hardware);

  CHECK(float_to_bf16_bits(float_of(0x7f7f8000u)) == 0x7f80);  // tie past the largest: Inf
  CHECK(float_to_bf16_bits(float_of(0x7f7f7fffu)) == 0x7f7f);
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(float_to_bf16_bits(float_of(0x00008000u)) == 0x0000);  // subnormal tie: even
  CHECK(float_to_bf16_bits(float_of(0x00018000u)) == 0x0002);
  CHECK(float_to_bf16_bits(float_of(0x80008001u)) == 0x8001);
  CHECK(float_to_bf16_bits(-INFINITY) == 0xff80);
  CHECK(float_to_bf16_bits(float_of(0x7f800001u)) == 0x7fc0);  // signalling NaN: quieted
  CHECK(float_to_bf16_bits(float_of(0xffa10000u)) == 0xffe1);  // sign and payload kept
}

TEST_CASE("float -> bf16: random floats match IEEE and AVX512-BF16", "[dtype][bf16]") {
  Bf16EncodeCheck check;
  random_floats(0x5eedbfu, 1'500'000, 0, 255, check);  // bf16 rounds at every exponent
  REQUIRE_NONE(check.vs_ieee);
  REQUIRE_NONE(check.vs_hardware);
}

// ---- every float (hidden, about a minute: run `test_dtype [exhaustive]`) -----------------

TEST_CASE("float -> fp16/bf16: all 2^32 floats match the hardware", "[.][exhaustive]") {
  const bool f16c = have_f16c();
  const bool bf16 = have_avx512_bf16();
  if (!f16c && !bf16) {
    WARN("neither F16C nor AVX512-BF16 on this CPU: nothing to compare with");
    return;
  }
  Mismatches vs_f16c, vs_bf16, vs_ieee_bf16;
  for (uint64_t i = 0; i <= 0xffffffffu; ++i) {
    const float x = float_of(static_cast<uint32_t>(i));
    if (f16c && float_to_fp16_bits(x) != f16c_from_float(x))
      vs_f16c.add(fmt::format("{} -> {}, F16C {}", hex(bits_of(x), 8), hex(float_to_fp16_bits(x), 4),
                              hex(f16c_from_float(x), 4)));
    // The instruction flushes subnormal inputs: those go to the IEEE reference instead.
    const bool subnormal = std::fpclassify(x) == FP_SUBNORMAL;
    if (bf16 && !subnormal && float_to_bf16_bits(x) != avx512_bf16_from_float(x))
      vs_bf16.add(fmt::format("{} -> {}, AVX512-BF16 {}", hex(bits_of(x), 8), hex(float_to_bf16_bits(x), 4),
                              hex(avx512_bf16_from_float(x), 4)));
    if (subnormal && float_to_bf16_bits(x) != ref_encode_float(x, bf16_format))
      vs_ieee_bf16.add(fmt::format("{} -> {}, IEEE {}", hex(bits_of(x), 8), hex(float_to_bf16_bits(x), 4),
                                   hex(ref_encode_float(x, bf16_format), 4)));
  }
  REQUIRE_NONE(vs_f16c);
  REQUIRE_NONE(vs_bf16);
  REQUIRE_NONE(vs_ieee_bf16);
}

// ---- value types ------------------------------------------------------------------------

TEST_CASE("fp16_t and bf16_t are 16-bit, trivially copyable, explicit", "[dtype]") {
  using dscpp::bf16_t;
  using dscpp::fp16_t;
  STATIC_REQUIRE(sizeof(fp16_t) == 2);
  STATIC_REQUIRE(sizeof(bf16_t) == 2);
  STATIC_REQUIRE(std::is_trivially_copyable_v<fp16_t>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<bf16_t>);
  STATIC_REQUIRE(std::is_trivially_default_constructible_v<fp16_t>);
  STATIC_REQUIRE(std::is_standard_layout_v<bf16_t>);
  STATIC_REQUIRE(!std::is_convertible_v<float, fp16_t>);  // no silent rounding
  STATIC_REQUIRE(!std::is_convertible_v<fp16_t, float>);
  STATIC_REQUIRE(!std::is_convertible_v<float, bf16_t>);
  CHECK(fp16_t(1.0f).bits == 0x3c00);
  CHECK(bf16_t(-2.0f).bits == 0xc000);
  CHECK(static_cast<float>(fp16_t::from_bits(0x3555)) == 0x1.554p-2f);
  CHECK(static_cast<float>(bf16_t::from_bits(0x3f80)) == 1.0f);
}
