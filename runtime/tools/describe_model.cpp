#include "runtime/tools/describe_model.h"

#include "configs/json.h"
#include "core/log.h"

#include <fmt/format.h>

#include <cstdio>

namespace dscpp::runtime {
namespace {

void log_to_stderr(void*, const char* message) { log::info("{}", message); }

}  // namespace

ModelParamCounts model_param_counts(const Plugin& plugin) {
  std::vector<LayerParamCount> layers;
  for (const LayerDecl& layer : plugin.layers()) {
    LayerParamCount c{layer.name, 0};
    for (const ParamDecl& p : layer.params) c.params += p.numel;
    layers.push_back(std::move(c));
  }
  return count_model_params(std::move(layers));
}

std::string model_counts_json(const std::string& model_name, const ModelParamCounts& c) {
  std::string layers;
  for (const auto& l : c.layers)
    layers += fmt::format("{}{{\"name\": {}, \"params\": {}}}", layers.empty() ? "" : ", ", config::json_quote(l.name),
                          l.params);
  return fmt::format(
      "{{\"model\": {}, \"total_params\": {}, \"largest_layer_params\": {}, \"largest_layer\": {}, \"layers\": [{}]}}",
      config::json_quote(model_name), c.total, c.largest_layer, config::json_quote(c.largest_layer_name), layers);
}

int run_describe_model(const std::string& model_path, const std::vector<std::string>& plugin_args,
                       const FreezeOptions& freeze) {
  log::init_logging(-1);  // logs go to stderr; stdout carries only the JSON line
  Plugin plugin(model_path);
  dscpp_host_info host{};
  host.struct_size = sizeof(host);
  host.rank = 0;
  host.world_size = 1;
  host.local_rank = 0;
  host.compute_dtype = DSCPP_F32;
  host.seed = 42;
  host.device_name = "cpu";
  host.log = log_to_stderr;
  plugin.create(plugin_args, host);
  apply_freeze(plugin, freeze);
  std::string line = model_counts_json(plugin.name(), model_param_counts(plugin));
  // Each parameter with its role (what weight-decay choices act on), after the counts.
  std::string params;
  for (const LayerDecl& layer : plugin.layers())
    for (const ParamDecl& p : layer.params)
      params +=
          fmt::format("{}{{\"name\": {}, \"numel\": {}, \"role\": \"{}\"{}}}", params.empty() ? "" : ", ",
                      config::json_quote(p.name), p.numel, role_name(p.role), p.frozen ? ", \"frozen\": true" : "");
  line.pop_back();  // the closing brace
  line += fmt::format(", \"frozen_params\": {}, \"parameters\": [{}]}}\n", count_frozen(plugin.layers()).frozen_numel,
                      params);
  std::fputs(line.c_str(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace dscpp::runtime
