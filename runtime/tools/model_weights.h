// A model's weights for the single-rank tools (dscpp gradcheck, dscpp generate): fp32 on the
// host, in the flat layout's order.
#pragma once

#include "runtime/model/flat_layout.h"
#include "runtime/model/plugin.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::runtime {

// From the checkpoint `load_dir` names (a save directory or a tag; any stage and world size,
// its files checked against their digests) when given, else from the plugin's init_from, else
// from each parameter's init rule (seed). Says where they came from on stdout.
std::vector<float> model_weights(const Plugin& plugin, const FlatLayout& layout, uint64_t seed,
                                 const std::string& load_dir = "");

// The host info a single-rank tool creates the plugin with (fp32 compute).
dscpp_host_info standalone_host(const std::string& device_name, uint64_t seed);

}  // namespace dscpp::runtime
