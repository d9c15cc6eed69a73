#include "runtime/train/batch_loader.h"

#include "core/error.h"

#include <algorithm>

namespace dscpp::runtime {

BatchLoader::BatchLoader(const Plugin& plugin, Device& device, int split, int64_t micro_batch,
                         const DistributedSampler& sampler, bool drop_last)
    : plugin_(plugin), device_(device), split_(split), micro_(micro_batch), sampler_(sampler) {
  const dscpp_data_desc& d = plugin.data();
  int64_t n = sampler_.samples_per_rank();
  per_epoch_ = drop_last ? n / micro_ : (n + micro_ - 1) / micro_;
  if (per_epoch_ == 0)
    fail("each rank gets {} samples per epoch, fewer than one micro-batch of {} (dataloader_drop_last is on)", n,
         micro_);
  input_bytes_ = d.input_numel * 4;  // fp32 or int32
  host_input_.resize(static_cast<size_t>(micro_ * input_bytes_));
  host_target_.resize(static_cast<size_t>(micro_ * d.target_numel));
  input_ = DeviceBuffer(device, host_input_.size(), MemCategory::buffers);
  target_ = DeviceBuffer(device, host_target_.size() * sizeof(int32_t), MemCategory::buffers);
}

void BatchLoader::load_epoch(int64_t epoch) {
  if (epoch == epoch_loaded_) return;
  order_ = sampler_.indices(epoch);
  epoch_loaded_ = epoch;
}

void BatchLoader::seek(int64_t micro_batches) { produced_ = micro_batches; }

MicroBatch BatchLoader::next() {
  int64_t epoch = produced_ / per_epoch_;
  int64_t first = (produced_ % per_epoch_) * micro_;
  load_epoch(epoch);
  int64_t size = std::min<int64_t>(micro_, static_cast<int64_t>(order_.size()) - first);
  const dscpp_data_desc& d = plugin_.data();
  for (int64_t i = 0; i < size; ++i)
    plugin_.load_sample(split_, order_[static_cast<size_t>(first + i)], host_input_.data() + i * input_bytes_,
                        host_target_.data() + i * d.target_numel);
  device_.copy_from_host(input_.data(), host_input_.data(), static_cast<size_t>(size * input_bytes_));
  device_.copy_from_host(target_.data(), host_target_.data(), static_cast<size_t>(size * d.target_numel) * 4);
  ++produced_;
  return MicroBatch{input_.data(), target_.as<int32_t>(), size, epoch,
                    plugin_.batch_lengths(host_input_.data(), host_target_.data(), size)};
}

}  // namespace dscpp::runtime
