// fp16/bf16 conversions (core/half.h), bulk `convert` and dtype names (core/dtype.h).
//
// Every result is compared bit for bit with references that share no code with the
// implementation:
//   * x86 hardware when the CPU has it: F16C (VCVTPH2PS, VCVTPS2PH with an explicit
//     round-to-nearest-even immediate) for fp16, AVX512-BF16 (VCVTNEPS2BF16) for float -> bf16;
//   * decoders and an encoder written from the IEEE-754 definitions in double arithmetic
//     (ldexp, frexp, nearbyint), parameterised only by the exponent and mantissa widths.
// Each check counts mismatches and REQUIREs the count to be 0, printing the first few bit
// patterns in hex, so 65536-pattern sweeps stay fast and a failure stays readable.
#include <fmt/core.h>
#include <catch2/catch.hpp>

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

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSCPP_TEST_X86 1
#else
#define DSCPP_TEST_X86 0
#endif

namespace {

using dscpp::bf16_bits_to_float;
using dscpp::float_to_bf16_bits;
using dscpp::float_to_fp16_bits;
using dscpp::fp16_bits_to_float;

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t u) {
  return std::bit_cast<float>(u);
}
std::string hex(uint32_t v, int digits) {
  return fmt::format("0x{:0{}x}", v, digits);
}

// Counts mismatches and keeps the first few descriptions for the failure report.
struct Mismatches {
  size_t count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 8) first += "\n  " + what;
  }
};

#define REQUIRE_NONE(m)                                                       \
  do {                                                                        \
    INFO(#m << ": " << (m).count << " mismatches, first ones:" << (m).first); \
    REQUIRE((m).count == 0);                                                  \
  } while (0)

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

// ---- IEEE-754 references ----------------------------------------------------------------

// A binary interchange format: 1 sign bit, `exp_bits` biased exponent, `man_bits` trailing
// significand (IEEE 754-2019, 3.4). fp16 is {5, 10}, bf16 is {8, 7}.
struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  uint32_t inf() const { return ((1u << exp_bits) - 1) << man_bits; }
  uint32_t quiet_bit() const { return 1u << (man_bits - 1); }
  double max_finite() const { return std::ldexp(2.0 - std::ldexp(1.0, -man_bits), bias()); }
};
constexpr Format fp16_format{5, 10};
constexpr Format bf16_format{8, 7};

bool ref_is_nan(uint32_t bits, Format f) {
  return (bits & ~f.sign_bit()) > f.inf();
}

// The value of a non-NaN encoding: (-1)^s 2^(E-bias) (1 + T 2^-p) for normal E, and
// (-1)^s 2^emin (0 + T 2^-p) for E == 0.
double ref_value(uint32_t bits, Format f) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const int biased = static_cast<int>((bits >> f.man_bits) & ((1u << f.exp_bits) - 1));
  const double t = static_cast<double>(bits & ((1u << f.man_bits) - 1));
  double magnitude;
  if (biased == (1 << f.exp_bits) - 1)
    magnitude = std::numeric_limits<double>::infinity();
  else if (biased == 0)
    magnitude = std::ldexp(t, f.emin() - f.man_bits);
  else
    magnitude = std::ldexp(std::ldexp(1.0, f.man_bits) + t, biased - f.bias() - f.man_bits);
  return negative ? -magnitude : magnitude;
}

// The float a decoder must return, from the contract: the exact value, or for NaN the same
// sign, the quiet bit, and the payload in the top mantissa bits.
uint32_t ref_decode(uint32_t bits, Format f) {
  if (ref_is_nan(bits, f)) {
    const uint32_t sign = (bits & f.sign_bit()) != 0 ? 0x80000000u : 0u;
    const uint32_t payload = bits & ((1u << f.man_bits) - 1);
    return sign | 0x7f800000u | 0x00400000u | (payload << (23 - f.man_bits));
  }
  return bits_of(static_cast<float>(ref_value(bits, f)));  // exact: every value fits a float
}

// Rounds x as IEEE 754 defines it for round-to-nearest-even: the exact value is rounded to the
// quantum of its binade (binades below the smallest normal share the subnormal quantum), and a
// result above the largest finite value becomes Inf. Every step is exact in double except
// nearbyint, which rounds with the default (nearest, ties to even) mode.
uint32_t ref_encode(double x, Format f) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0u;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | f.inf();
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, f.emin());
  const double quantum = std::ldexp(1.0, exponent - f.man_bits);
  const double rounded = std::nearbyint(a / quantum) * quantum;
  if (rounded > f.max_finite()) return sign | f.inf();
  if (rounded < std::ldexp(1.0, f.emin()))  // subnormal (or zero): E = 0, T = r / 2^(emin-p)
    return sign | static_cast<uint32_t>(rounded / std::ldexp(1.0, f.emin() - f.man_bits));
  std::frexp(rounded, &e);
  const int biased = e - 1 + f.bias();
  const uint32_t t = static_cast<uint32_t>(rounded / std::ldexp(1.0, e - 1 - f.man_bits)) - (1u << f.man_bits);
  return sign | (static_cast<uint32_t>(biased) << f.man_bits) | t;
}

// The encoding a float must get, NaN included: same sign, quiet bit, top payload bits.
uint32_t ref_encode_float(float x, Format f) {
  if (std::isnan(x)) {
    const uint32_t b = bits_of(x);
    const uint32_t sign = (b & 0x80000000u) != 0 ? f.sign_bit() : 0u;
    return sign | f.inf() | f.quiet_bit() | ((b & 0x7fffffu) >> (23 - f.man_bits));
  }
  return ref_encode(static_cast<double>(x), f);
}

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

