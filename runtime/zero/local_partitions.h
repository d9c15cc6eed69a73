// This rank's fp32 training state as a checkpoint sees it: the master weights and each
// optimizer state, addressed as the layout's concatenated partitions (element `part_at` of
// a rank's partitions, checkpoint/partition_layout.h), wherever the groups actually live
// (aliased fp32 parameters, a separate master copy, per-group optimizer buffers; device, host
// or NVMe — every access goes through MasterWeights::copy_out/copy_in).
//
// Saving reads out through copy_out; loading (a checkpoint of any layout, or --init_from)
// goes through load_owned, which asks a TensorSource for exactly the fragments this rank
// owns, in bounded chunks: at stage 3 no rank ever holds more than its partitions plus one
// chunk.
#pragma once

#include "checkpoint/partition_layout.h"
#include "checkpoint/tensor_source.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/optim/optimizer.h"
#include "runtime/zero/master_weights.h"
#include "runtime/zero/param_store.h"

#include <string>
#include <vector>

namespace dscpp::runtime {

// The layout as checkpoints describe it.
ckpt::PartitionLayout checkpoint_layout(const FlatLayout& layout);

class LocalPartitions {
 public:
  // `rank`: this rank in the layout's partitioning (ignored when layout.parts == 1). Without a
  // master and optimizer (--eval_only) the master weights are the parameters themselves,
  // written as fp32 through `params` (rounded to their dtype); there are no states, and
  // nothing can be read out (a weights-only engine does not save).
  LocalPartitions(const FlatLayout& layout, int rank, MasterWeights* master, Optimizer* optimizer,
                  ParamStore* params = nullptr);

  const ckpt::PartitionLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  // The optimizer state names (the same for every group; checked).
  const std::vector<std::string>& states() const { return states_; }
  // The optimizer's step count (the same for every group; checked).
  int64_t optimizer_step() const;

  // Elements [part_at, part_at + count) of `what` (ckpt::kMasterWeights or a state name) ⇄ host.
  void copy_out(const std::string& what, int64_t part_at, int64_t count, float* host) const;
  void copy_in(const std::string& what, int64_t part_at, int64_t count, const float* host);

  // Fills `dst` with elements [first, first + count) of parameter `param`'s `what`; every
  // element must be owned by this rank (stage 0, or a fragment of owned_fragments).
  void copy_param_out(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) const;

  // For every parameter, reads the elements this rank owns of each of `whats` from `source`
  // (matched by name). The caller has checked that the source has every parameter and state.
  // skip_missing: a parameter the source lacks keeps what this rank holds (else an error).
  void load_owned(ckpt::TensorSource& source, const std::vector<std::string>& whats, bool skip_missing = false);

 private:
  ckpt::PartitionLayout layout_;
  int rank_;
  MasterWeights* master_;
  Optimizer* optimizer_;
  ParamStore* params_;
  std::vector<std::string> states_;
};

}  // namespace dscpp::runtime
