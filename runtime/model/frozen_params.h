// Which parameters train: PyTorch's requires_grad=False, chosen by name.
//
// A parameter is frozen when the model declares it so (a LoRA model freezes its base weights),
// when it matches a --freeze pattern, or when --train_only patterns are given and it matches
// none of them. Patterns are shell globs over full names (fnmatch without FNM_PATHNAME: `*`
// crosses dots), as people write `model.embed_tokens.*`. A frozen parameter still exists
// everywhere a weight does (ZeRO-3 partitions and gathers it, checkpoints hold it); it has no
// gradient, optimizer state or gradient traffic.
#pragma once

#include "runtime/model/plugin.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct FreezeOptions {
  std::vector<std::string> freeze;      // --freeze GLOB (repeatable)
  std::vector<std::string> train_only;  // --train_only GLOB (repeatable)
};

// Marks the parameters the options freeze. Throws dscpp::Error for a pattern that matches no
// parameter (naming the closest full name) and when nothing would train.
void apply_freeze(Plugin& plugin, const FreezeOptions& options);

struct FrozenCount {
  int64_t params = 0, frozen_params = 0;  // tensors
  int64_t numel = 0, frozen_numel = 0;    // elements
};
FrozenCount count_frozen(const std::vector<LayerDecl>& layers);

// "trainable 12,345 of 1,234,567 parameters (1.00%); frozen 80 tensors" — the log line, or ""
// when nothing is frozen.
std::string describe_frozen(const std::vector<LayerDecl>& layers);

}  // namespace dscpp::runtime
