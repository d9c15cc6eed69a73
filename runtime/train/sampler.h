// Distributed sampling with torch's DistributedSampler semantics, which DeepSpeed's
// dataloader uses: each epoch's order is a permutation seeded by (seed + epoch) — the same on
// every rank and for every world size — padded by repeating its head (or truncated, with
// drop_last) to a multiple of the world size; rank r takes positions r, r+W, r+2W, ...
//
// So at a given step the W ranks together consume the same samples one rank with a W-times
// larger micro-batch would, which is what makes N-rank runs comparable with 1-rank runs.
#pragma once

#include <cstdint>
#include <vector>

namespace dscpp::runtime {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle, uint64_t seed, bool drop_last);

  int64_t samples_per_rank() const { return per_rank_; }
  // This rank's sample indices for `epoch`, in order.
  std::vector<int64_t> indices(int64_t epoch) const;

 private:
  int64_t size_;
  int rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_rank_;
};

// Micro-batches per epoch on each rank (the last one short unless drop_last drops it).
int64_t micro_batches_per_epoch(int64_t dataset_size, int world_size, int64_t micro_batch, bool drop_last);

// Optimizer steps that `epochs` passes over the data take (whole accumulation windows only).
int64_t steps_for_epochs(double epochs, int64_t dataset_size, int world_size, int64_t micro_batch, int64_t gas,
                         bool drop_last);

// The whole order of an epoch (before sharding): identity, or a Fisher–Yates permutation
// driven by a counter-based generator of (seed, epoch).
std::vector<int64_t> epoch_order(int64_t dataset_size, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace dscpp::runtime
