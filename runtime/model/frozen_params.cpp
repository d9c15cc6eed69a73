#include "runtime/model/frozen_params.h"

#include "configs/load.h"
#include "core/error.h"

#include <fmt/format.h>
#include <fnmatch.h>

namespace dscpp::runtime {
namespace {

bool matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns)
    if (matches(p, name)) return true;
  return false;
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

}  // namespace

void apply_freeze(Plugin& plugin, const FreezeOptions& options) {
  if (options.freeze.empty() && options.train_only.empty()) {
    const FrozenCount c = count_frozen(plugin.layers());
    if (c.params > 0 && c.frozen_params == c.params)
      fail("model plugin {}: every parameter is frozen, so there is nothing to train", plugin.name());
    return;
  }
  std::vector<std::string> names;
  for (const LayerDecl& l : plugin.layers())
    for (const ParamDecl& p : l.params) names.push_back(p.name);
  for (const auto* list : {&options.freeze, &options.train_only})
    for (const std::string& pattern : *list) {
      bool any = false;
      for (const std::string& n : names) any = any || matches(pattern, n);
      if (!any)
        fail(
            "{} '{}' matches no parameter of {} (closest: '{}'; patterns are globs over full names, `*` "
            "crossing dots)",
            list == &options.freeze ? "--freeze" : "--train_only", pattern, plugin.name(),
            config::closest_match(pattern, names));
    }
  const auto& layers = plugin.layers();
  for (size_t l = 0; l < layers.size(); ++l)
    for (size_t i = 0; i < layers[l].params.size(); ++i) {
      const ParamDecl& p = layers[l].params[i];
      const bool frozen = p.frozen || matches_any(options.freeze, p.name) ||
                          (!options.train_only.empty() && !matches_any(options.train_only, p.name));
      plugin.set_frozen(static_cast<int>(l), static_cast<int>(i), frozen);
    }
  const FrozenCount c = count_frozen(plugin.layers());
  if (c.frozen_params == c.params)
    fail("--freeze / --train_only leave no parameter of {} to train (all {} are frozen)", plugin.name(), c.params);
}

FrozenCount count_frozen(const std::vector<LayerDecl>& layers) {
  FrozenCount c;
  for (const LayerDecl& l : layers)
    for (const ParamDecl& p : l.params) {
      ++c.params;
      c.numel += p.numel;
      if (p.frozen) {
        ++c.frozen_params;
        c.frozen_numel += p.numel;
      }
    }
  return c;
}

std::string describe_frozen(const std::vector<LayerDecl>& layers) {
  const FrozenCount c = count_frozen(layers);
  if (c.frozen_params == 0) return "";
  const int64_t trainable = c.numel - c.frozen_numel;
  return fmt::format("trainable parameters: {} of {} ({:.4f}%); {} of {} tensors frozen", with_commas(trainable),
                     with_commas(c.numel), 100.0 * static_cast<double>(trainable) / static_cast<double>(c.numel),
                     c.frozen_params, c.params);
}

}  // namespace dscpp::runtime
