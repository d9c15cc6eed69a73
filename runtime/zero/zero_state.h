// The model state ZeRO partitions, as one rank holds it: the flat layout the parts share, the
// parameters (ParamStore), the gradients (GradReducer), the optimizer and the fp32 master
// weights it updates (MasterWeights). The stage decides only where each part keeps its slices.
// Declared in this order so that they are destroyed master first, layout last: each part
// refers to the ones before it.
#pragma once

#include "runtime/model/flat_layout.h"
#include "runtime/optim/optimizer.h"
#include "runtime/zero/grad_reducer.h"
#include "runtime/zero/master_weights.h"
#include "runtime/zero/model_params.h"
#include "runtime/zero/param_store.h"

#include <memory>

namespace dscpp::runtime {

struct ZeroState {
  FlatLayout layout;         // the trained parameters (all of them when none is frozen)
  FlatLayout frozen_layout;  // the frozen ones (runtime/model/frozen_params.h); empty when none is
  std::unique_ptr<ParamStore> params;
  std::unique_ptr<ParamStore> frozen;        // null when nothing is frozen
  std::unique_ptr<GradReducer> grads;        // none with --eval_only
  std::unique_ptr<Optimizer> optimizer;      // likewise
  std::unique_ptr<MasterWeights> master;     // likewise

  ModelParams model() const { return ModelParams(*params, frozen.get()); }
};

}  // namespace dscpp::runtime
