// `dscpp-runtime --model M.so --describe_model [-- plugin args]`: load the plugin, print its
// parameter counts as one JSON line on stdout and exit. `dscpp estimate --model` runs this
// because the launcher never loads plugins (they may pull in engine code).
//
// The line: {"model": NAME, "total_params": P, "largest_layer_params": Lp,
//            "largest_layer": NAME, "layers": [{"name": NAME, "params": N}, ...],
//            "parameters": [{"name": FULL_NAME, "numel": N, "role": ROLE}, ...]}
// with P and Lp as in core/zero_estimate.h (count_model_params) and ROLE the parameter's
// dscpp_param_role ("weight", "bias", "norm", "embedding"), which weight-decay choices act on.
#pragma once

#include "core/zero_estimate.h"
#include "runtime/model/frozen_params.h"
#include "runtime/model/plugin.h"

#include <string>
#include <vector>

namespace dscpp::runtime {

ModelParamCounts model_param_counts(const Plugin& plugin);
std::string model_counts_json(const std::string& model_name, const ModelParamCounts& counts);

// Creates the plugin as a single rank, prints the line; returns the exit status.
int run_describe_model(const std::string& model_path, const std::vector<std::string>& plugin_args,
                       const FreezeOptions& freeze = {});

}  // namespace dscpp::runtime
