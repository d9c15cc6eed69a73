// Layer declarations for the runtime's unit tests, as a plugin would declare them: a layer of
// one-dimensional parameters "<name>.p0", "<name>.p1", ... of the given sizes (none: a layer
// without parameters).
#pragma once

#include "runtime/model/plugin.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::test {

inline runtime::LayerDecl layer_decl(const std::string& name, const std::vector<int64_t>& numels) {
  runtime::LayerDecl l;
  l.name = name;
  for (size_t i = 0; i < numels.size(); ++i) {
    runtime::ParamDecl p;
    p.name = name + ".p" + std::to_string(i);
    p.shape = {numels[i]};
    p.numel = numels[i];
    p.slot = static_cast<int>(i);
    l.params.push_back(p);
  }
  l.num_slots = static_cast<int>(l.params.size());
  return l;
}

}  // namespace dscpp::test
