#include "offload/byte_size.h"

#include "core/error.h"

#include <fmt/core.h>

#include <cctype>
#include <limits>

namespace dscpp::offload {

int64_t parse_bytes(std::string_view text, std::string_view what) {
  std::string_view s = text;
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0 || digits > 15)
    fail("{}: expected a byte count such as 4096, 256K, 1M or 1G, found \"{}\"", what, text);
  int64_t value = std::stoll(std::string(s.substr(0, digits)));
  std::string unit;
  for (char c : s.substr(digits)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && (unit.substr(1) == "b" || unit.substr(1) == "ib")) unit.resize(1);
  int shift = 0;
  if (unit.empty() || unit == "b")
    shift = 0;
  else if (unit == "k")
    shift = 10;
  else if (unit == "m")
    shift = 20;
  else if (unit == "g")
    shift = 30;
  else if (unit == "t")
    shift = 40;
  else
    fail("{}: unknown unit in \"{}\" (expected K, M, G or T, binary multiples)", what, text);
  if (value <= 0 || value > (std::numeric_limits<int64_t>::max() >> shift))
    fail("{}: \"{}\" must be a positive byte count", what, text);
  return value << shift;
}

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 && bytes > -1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while ((v >= 1024 || v <= -1024) && u < 3) v /= 1024, ++u;
  return fmt::format("{:.2f} {}", v, kUnits[u]);
}

std::string short_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && bytes != 0 && bytes % 1024 == 0) bytes /= 1024, ++u;
  return fmt::format("{}{}", bytes, kUnits[u]);
}

}  // namespace dscpp::offload
