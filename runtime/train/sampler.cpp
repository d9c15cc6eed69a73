#include "runtime/train/sampler.h"

#include "core/error.h"

#include <numeric>

namespace dscpp::runtime {
namespace {
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  uint64_t state = mix(seed ^ mix(static_cast<uint64_t>(epoch) + 0x5EED));
  for (int64_t i = n - 1; i > 0; --i) {
    state = mix(state);
    // Multiply-shift maps 64 random bits onto [0, i] with negligible bias for our sizes.
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(state) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(dataset_size), rank_(rank), world_(world_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  DSCPP_CHECK(world_size > 0 && rank >= 0 && rank < world_size);
  if (dataset_size <= 0) fail("the dataset is empty");
  per_rank_ = drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
  if (per_rank_ == 0)
    fail("the dataset has {} samples, fewer than the {} ranks (dataloader_drop_last is on)", dataset_size, world_size);
}

int64_t micro_batches_per_epoch(int64_t n, int world, int64_t micro, bool drop_last) {
  int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
  return drop_last ? per_rank / micro : (per_rank + micro - 1) / micro;
}

int64_t steps_for_epochs(double epochs, int64_t n, int world, int64_t micro, int64_t gas, bool drop_last) {
  double micro_batches = epochs * static_cast<double>(micro_batches_per_epoch(n, world, micro, drop_last));
  return static_cast<int64_t>(micro_batches / static_cast<double>(gas));
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order = epoch_order(size_, shuffle_, seed_, epoch);
  int64_t total = per_rank_ * world_;
  // Padding repeats the head of the order (several times if the dataset is tiny).
  for (int64_t i = size_; i < total; ++i) order.push_back(order[static_cast<size_t>(i - size_)]);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t p = rank_; p < total; p += world_) mine.push_back(order[static_cast<size_t>(p)]);
  return mine;
}

}  // namespace dscpp::runtime
