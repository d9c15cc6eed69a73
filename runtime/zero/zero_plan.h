// What a ZeRO stage partitions, decided once from zero_optimization.stage (DeepSpeed's stages:
// 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters). The engine and
// its parts (GradReducer, ParamStore, MasterWeights, the memory plan) read these facts instead of
// comparing stage numbers; `stage` itself stays for what reports it (logs, checkpoint metadata,
// messages, the estimator's rows).
#pragma once

#include "core/error.h"

namespace dscpp::runtime {

// How the data-parallel ranks combine their gradients (runtime/zero/grad_reducer.h says how each runs).
enum class GradReduction {
  allreduce,         // stage 0: whole buckets, every rank keeps the whole sum
  into_whole_array,  // stage 1: accumulated locally, each group reduce-scattered once per step into
                     // this rank's slice of the whole gradient array
  into_partition,    // stages 2-3: per micro-step, through staging buffers, into a gradient partition
};

struct ZeroPlan {
  int stage = 0;
  bool optimizer_partitioned = false;   // each rank steps (and keeps the state of) its slice
  bool gradients_partitioned = false;   // each rank keeps only its slice of the reduced gradients
  bool parameters_partitioned = false;  // each rank keeps its slice; layers gather theirs to run
  GradReduction reduction = GradReduction::allreduce;

  // The stage's plan; throws for a stage outside 0-3 (the config check refuses those first).
  static ZeroPlan for_stage(int stage) {
    if (stage < 0 || stage > 3) fail("zero_optimization.stage must be 0, 1, 2 or 3 (got {})", stage);
    ZeroPlan p;
    p.stage = stage;
    p.optimizer_partitioned = stage >= 1;
    p.gradients_partitioned = stage >= 2;
    p.parameters_partitioned = stage == 3;
    p.reduction = stage == 0 ? GradReduction::allreduce
                  : stage == 1 ? GradReduction::into_whole_array
                               : GradReduction::into_partition;
    return p;
  }
  // Partitions of the flat layout: one per rank once anything is partitioned.
  int parts(int world_size) const { return optimizer_partitioned ? world_size : 1; }
};

}  // namespace dscpp::runtime
