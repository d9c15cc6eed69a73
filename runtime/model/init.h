// Initial parameter values as a pure function of (seed, full parameter name, element index).
//
// Nothing here depends on the world size, the ZeRO stage or which rank asks, so a rank can
// initialise only the slice it owns and every layout starts from the same model. The
// generator is counter based (splitmix64 of a per-parameter key and the index), normal values
// by Box–Muller from two such draws.
#pragma once

#include "dscpp/model.h"

#include <cstdint>
#include <string_view>

namespace dscpp::runtime {

float init_value(uint64_t seed, std::string_view param_name, int64_t index, dscpp_init_kind kind, float a);

// Fills dst[0, count) with the values of elements [first, first+count) (fp32, host memory).
void init_range(uint64_t seed, std::string_view param_name, dscpp_init_kind kind, float a, int64_t first,
                int64_t count, float* dst);

}  // namespace dscpp::runtime
