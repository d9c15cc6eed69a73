// Micro-batches for this rank: the sampler's indices for the current epoch, cut into
// micro-batches of train_micro_batch_size_per_gpu, loaded through the plugin into host
// buffers and copied to the device. Epochs follow each other without a gap; the last
// micro-batch of an epoch is short unless dataloader_drop_last is set (then dropped).
//
// The loader's position is a pure function of how many micro-batches it has produced, so a
// checkpoint stores one number and resuming reproduces the same sequence.
#pragma once

#include "device/device.h"
#include "runtime/model/plugin.h"
#include "runtime/train/sampler.h"

#include <cstdint>
#include <vector>

namespace dscpp::runtime {

struct MicroBatch {
  const void* input = nullptr;      // device
  const int32_t* target = nullptr;  // device
  int64_t size = 0;
  int64_t epoch = 0;
  StreamLengths lengths{};  // what the model computes of each sample (Plugin::batch_lengths)
};

class BatchLoader {
 public:
  BatchLoader(const Plugin& plugin, Device& device, int split, int64_t micro_batch, const DistributedSampler& sampler,
              bool drop_last);

  MicroBatch next();
  int64_t produced() const { return produced_; }
  void seek(int64_t micro_batches);  // as if next() had been called that many times
  int64_t batches_per_epoch() const { return per_epoch_; }

 private:
  void load_epoch(int64_t epoch);

  const Plugin& plugin_;
  Device& device_;
  int split_;
  int64_t micro_;
  DistributedSampler sampler_;
  int64_t per_epoch_ = 0;
  int64_t produced_ = 0;
  int64_t epoch_loaded_ = -1;
  std::vector<int64_t> order_;
  std::vector<unsigned char> host_input_;
  std::vector<int32_t> host_target_;
  DeviceBuffer input_, target_;
  int64_t input_bytes_ = 0;  // per sample
};

}  // namespace dscpp::runtime
