// Fault injection for tests, driven by environment variables the engine reads at start-up.
#pragma once

#include <cstdint>
#include <set>
#include <string_view>

namespace dscpp::runtime {

// DSCPP_INJECT_OVERFLOW's step list: "3,4,9-12" → {3, 4, 9, 10, 11, 12}; fails naming the bad item.
std::set<int64_t> parse_step_list(std::string_view text);

}  // namespace dscpp::runtime
