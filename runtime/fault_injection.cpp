#include "runtime/fault_injection.h"

#include "core/error.h"

#include <string>

namespace dscpp::runtime {

std::set<int64_t> parse_step_list(std::string_view text) {
  std::set<int64_t> out;
  for (std::string_view rest = text; !rest.empty();) {
    size_t comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    size_t dash = item.find('-', 1);
    try {
      int64_t lo = std::stoll(item.substr(0, dash)),
              hi = dash == std::string::npos ? lo : std::stoll(item.substr(dash + 1));
      for (int64_t v = lo; v <= hi; ++v) out.insert(v);
    } catch (const std::exception&) {
      fail("DSCPP_INJECT_OVERFLOW: '{}' is not a step or a range of steps (expected e.g. 3,5,9-12)", item);
    }
  }
  return out;
}

}  // namespace dscpp::runtime
