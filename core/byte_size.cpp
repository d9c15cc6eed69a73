#include "core/byte_size.h"

#include "core/error.h"

#include <fmt/core.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>

namespace dscpp {

namespace {

struct Unit {
  const char* name;  // lower case
  int64_t factor;
};
constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"k", int64_t{1} << 10},
    {"kib", int64_t{1} << 10},
    {"m", int64_t{1} << 20},
    {"mib", int64_t{1} << 20},
    {"g", int64_t{1} << 30},
    {"gib", int64_t{1} << 30},
    {"t", int64_t{1} << 40},
    {"tib", int64_t{1} << 40},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", int64_t{1000} * 1000 * 1000},
    {"tb", int64_t{1000} * 1000 * 1000 * 1000},
};

}  // namespace

int64_t parse_bytes(std::string_view text, std::string_view what) {
  const auto not_a_count = [&] {
    fail("{}: expected a positive byte count such as 4096, 256K, 1.5G, 512MiB or 8GB, found \"{}\"", what, text);
  };
  // The number: digits, an optional fraction, an optional exponent ("1e9").
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i - start;
  };
  size_t count = digits();
  bool whole = true;
  if (i < text.size() && text[i] == '.') {
    ++i;
    count += digits();
    whole = false;
  }
  if (count == 0) not_a_count();
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    const size_t mark = i++;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0)
      i = mark;  // not an exponent: left for the unit, which it then is not
    else
      whole = false;
  }
  const std::string_view number = text.substr(0, i), unit_text = text.substr(i);
  std::string unit;
  for (char c : unit_text) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int64_t factor = 0;
  for (const Unit& u : kUnits)
    if (unit == u.name) factor = u.factor;
  if (factor == 0)
    fail("{}: expected a unit K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of 1000) or "
         "B after the number, found \"{}\" in \"{}\"",
         what, unit_text, text);
  const auto too_large = [&] {
    fail("{}: expected a byte count below 2^63 (8 EiB), found \"{}\"", what, text);
  };
  if (whole) {  // exactly, without rounding through a double
    int64_t value = 0;
    const auto [end, err] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (err == std::errc::result_out_of_range) too_large();
    if (err != std::errc() || end != number.data() + number.size() || value <= 0) not_a_count();
    if (value > std::numeric_limits<int64_t>::max() / factor) too_large();
    return value * factor;
  }
  const long double bytes = std::strtold(std::string(number).c_str(), nullptr) * static_cast<long double>(factor);
  if (!(bytes >= 1)) not_a_count();  // a fraction of a byte rounds to none
  if (bytes >= 9223372036854775808.0L) too_large();
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  static const char* const kNames[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 && bytes > -1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while ((v >= 1024 || v <= -1024) && u < 3) v /= 1024, ++u;
  return fmt::format("{:.2f} {}", v, kNames[u]);
}

std::string short_bytes(int64_t bytes) {
  static const char* const kNames[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && bytes != 0 && bytes % 1024 == 0) bytes /= 1024, ++u;
  return fmt::format("{}{}", bytes, kNames[u]);
}

}  // namespace dscpp
