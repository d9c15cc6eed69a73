#include "runtime/tools/model_weights.h"

#include "checkpoint/lora.h"
#include "checkpoint/weight_files.h"
#include "checkpoint/zero_to_fp32.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/model/init.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

namespace dscpp::runtime {
namespace {

void plugin_log(void*, const char* message) { log::info("{}", message); }

// Reads every parameter of `layout` that `files` holds with its shape into `p`; returns how many it lacks.
int64_t read_named(ckpt::WeightFiles& files, const FlatLayout& layout, std::vector<bool>& found,
                   std::vector<float>& p) {
  int64_t missing = 0;
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const ParamSlot& s = layout.params[k];
    if (found[k]) continue;
    const int64_t i = files.find(s.name);
    if (i < 0 || files.params()[size_t(i)].shape != s.shape) {
      ++missing;
      continue;
    }
    files.read(size_t(i), ckpt::kMasterWeights, 0, s.numel, &p[size_t(s.offset)]);
    found[k] = true;
  }
  return missing;
}

// The checkpoint's fp32 master weights by parameter name, and its frozen parameters, every
// parameter of the model required.
void from_checkpoint(const std::string& load_dir, const FlatLayout& layout, std::vector<float>& p) {
  ckpt::CheckpointReader reader(load_dir, ckpt::kMasterWeights);
  const ckpt::Manifest& m = reader.manifest();
  std::vector<bool> found(layout.params.size(), false);
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const ParamSlot& s = layout.params[k];
    const int64_t i = reader.find(s.name);
    if (i < 0) continue;
    if (reader.params()[size_t(i)].shape != s.shape)
      fail("checkpoint {}: parameter '{}' has another shape than the model's", load_dir, s.name);
    if (s.numel > 0) reader.read(size_t(i), 0, s.numel, &p[size_t(s.offset)]);
    found[k] = true;
  }
  for (size_t k = 0; k < layout.params.size(); ++k)
    if (!found[k])
      fail("checkpoint {} has no parameter '{}' of the model", reader.result().tag_dir, layout.params[k].name);
  std::printf("%s", fmt::format("weights from {} (step {})\n", reader.result().tag_dir, m.global_steps).c_str());
}

}  // namespace

std::vector<float> model_weights(const Plugin& plugin, const FlatLayout& layout, uint64_t seed,
                                 const std::string& load_dir) {
  std::vector<float> p(static_cast<size_t>(layout.total), 0.0f);
  if (!load_dir.empty()) {
    from_checkpoint(load_dir, layout, p);
    return p;
  }
  for (const ParamSlot& s : layout.params) init_range(seed, s.name, s.init, s.init_a, 0, s.numel, &p[size_t(s.offset)]);
  if (plugin.init_from().empty()) {
    std::printf("weights from the init rule (seed %llu)\n", static_cast<unsigned long long>(seed));
    return p;
  }
  // A file may name a shared parameter by any of its names (only lm_head.weight, say).
  ckpt::WeightFiles files(plugin.init_from(), plugin.file_transposed(), plugin.tied_names());
  std::vector<bool> found(layout.params.size(), false);
  int64_t missing = read_named(files, layout, found, p);
  if (!plugin.adapter_from().empty()) {  // PEFT's names: "base_model.model." + the parameter's
    std::map<std::string, std::string> peft;
    for (const ParamSlot& s : layout.params)
      if (s.adapter) peft[ckpt::kPeftPrefix + s.name] = s.name;
    ckpt::WeightFiles adapter(plugin.adapter_from(), {}, peft);
    missing = read_named(adapter, layout, found, p);
  }
  std::printf("%s", fmt::format("weights from {}{}{}\n", plugin.init_from(),
                                plugin.adapter_from().empty() ? "" : " and the adapter " + plugin.adapter_from(),
                                missing ? fmt::format(" ({} parameters not there keep their init rule)", missing) : "")
                        .c_str());
  return p;
}

dscpp_host_info standalone_host(const std::string& device_name, uint64_t seed) {
  static std::string name;  // the plugin may keep the pointer for its lifetime
  name = device_name;
  dscpp_host_info host{};
  host.struct_size = sizeof(host);
  host.world_size = 1;
  host.compute_dtype = DSCPP_F32;
  host.seed = seed;
  host.device_name = name.c_str();
  host.log = plugin_log;
  return host;
}

}  // namespace dscpp::runtime
