#include "runtime/offload/param_home.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "kernels/device_math.h"
#include "runtime/offload/optimizer_offload.h"
#include "runtime/offload/param_swap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dscpp::runtime {

ParamHome::ParamHome(const FlatLayout& layout, int rank, Device& device, Device& host, DType dtype, bool partitioned,
                     const ParamOffloadPlan& offload)
    : layout_(layout),
      device_(device),
      host_(host),
      dtype_(dtype),
      elem_(dtype_size(dtype)),
      partitioned_(partitioned),
      rank_(layout.parts == 1 ? 0 : rank),
      offload_(offload),
      where_(layout.groups.size(), Where::device),
      offset_(layout.groups.size(), 0) {
  if (!partitioned && offload.device != OffloadDevice::none)
    fail("offload_param needs partitioned (ZeRO stage 3) parameters");
  if (offload.device == OffloadDevice::none) {
    const int64_t n = partitioned ? layout.part_total : layout.total;
    device_data_ = DeviceBuffer(device, static_cast<size_t>(n) * elem_, MemCategory::params, true);
    for (size_t g = 0; g < layout.groups.size(); ++g)
      offset_[g] = partitioned ? layout.groups[g].part_offset : layout.groups[g].owned_begin(rank_);
    return;
  }
  Placement p = place(layout, dtype, offload);
  where_ = std::move(p.where);
  offset_ = std::move(p.offset);
  host_elements_ = p.host_elements;
  nvme_elements_ = p.nvme_elements;
  const int64_t slots = p.slots, largest_swapped = p.largest_swapped;
  if (host_elements_ > 0)
    host_data_ = DeviceBuffer(host, static_cast<size_t>(host_elements_) * elem_, MemCategory::params, true);
  if (slots > 0) {
    if (largest_swapped > offload.buffer_size)
      fail("zero_optimization.offload_param.buffer_size: {} elements, but the largest parameter slice swapped to "
           "NVMe has {} (a swap buffer holds one slice); raise buffer_size to at least {}",
           offload.buffer_size, largest_swapped, largest_swapped);
    // Pinning helps only a GPU's DMA; on a host device it would just spend the memlock limit.
    ParamOffloadPlan o = offload;
    o.pin_memory = offload.pin_memory && !device.is_host();
    swap_ = std::make_unique<ParamSwap>(o, rank, largest_swapped * static_cast<int64_t>(elem_), slots);
  }
}

ParamHome::Placement ParamHome::place(const FlatLayout& layout, DType dtype, const ParamOffloadPlan& offload) {
  Placement p;
  p.where.assign(layout.groups.size(), Where::device);
  p.offset.assign(layout.groups.size(), 0);
  if (offload.device == OffloadDevice::none) return p;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  // DeepSpeed swaps a slice only when its bytes reach max(1 MiB, aio block_size):
  // smaller requests cost more in latency than they save in memory.
  const int64_t min_swap = std::max<int64_t>(int64_t{1} << 20, offload.aio.block_size);
  int64_t in_cpu = 0;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const int64_t part = layout.groups[g].part;
    const bool swappable = offload.device == OffloadDevice::nvme && part * elem >= min_swap;
    if (swappable && in_cpu + part > offload.max_in_cpu) {
      p.where[g] = Where::nvme;
      p.offset[g] = p.slots++;
      p.nvme_elements += part;
      p.largest_swapped = std::max(p.largest_swapped, part);
    } else {
      p.where[g] = Where::host;
      p.offset[g] = p.host_elements;
      p.host_elements += part;
      if (swappable) in_cpu += part;
    }
  }
  return p;
}

ParamHome::~ParamHome() = default;

char* ParamHome::slice(int group) const {
  const size_t g = static_cast<size_t>(group);
  const int64_t at = offset_[g] * static_cast<int64_t>(elem_);
  switch (where_[g]) {
    case Where::device: return static_cast<char*>(device_data_.data()) + at;
    case Where::host: return static_cast<char*>(host_data_.data()) + at;
    case Where::nvme: break;
  }
  return nullptr;
}

void* ParamHome::on_device(int group) const {
  return where_[static_cast<size_t>(group)] == Where::device ? slice(group) : nullptr;
}

ParamHome::Access ParamHome::open(int group, bool write, bool overwrite) {
  const size_t g = static_cast<size_t>(group);
  if (where_[g] != Where::nvme) return Access(this, group, slice(group), write);
  const int64_t bytes = layout_.groups[g].part * static_cast<int64_t>(elem_);
  return Access(this, group, swap_->acquire(static_cast<int>(offset_[g]), bytes, !overwrite), write);
}

void ParamHome::close(int group, bool write) {
  const size_t g = static_cast<size_t>(group);
  if (where_[g] != Where::nvme) return;
  swap_->release(static_cast<int>(offset_[g]), layout_.groups[g].part * static_cast<int64_t>(elem_), write);
}

ParamHome::Access::~Access() {
  if (home_) home_->close(group_, write_);
}

void ParamHome::copy_to_device(int group, void* device_dst) {
  const size_t bytes = static_cast<size_t>(layout_.groups[static_cast<size_t>(group)].part) * elem_;
  if (bytes == 0) return;
  Access a = open(group, false);
  if (where_[static_cast<size_t>(group)] == Where::device)
    device_.copy(device_dst, a.data(), bytes);
  else
    device_.copy_from_host(device_dst, a.data(), bytes);
}

kernels::DeviceMath& ParamHome::math_at(int group) const {
  return kernels::math_of(where_[static_cast<size_t>(group)] == Where::device ? device_ : host_);
}

void ParamHome::read_f32(int group, int64_t offset, int64_t count, float* dst) {
  if (count == 0) return;
  Access a = open(group, false);
  // The slice's memory decides where the cast runs; `dst` must be reachable from there
  // (MasterWeights stages a GPU master through the host).
  math_at(group).load_to_f32(a.as<char>() + offset * static_cast<int64_t>(elem_), dtype_, dst, 1.0f, count);
}

void ParamHome::write_f32(int group, int64_t offset, int64_t count, const float* src) {
  if (count == 0) return;
  const bool whole = offset == 0 && count == layout_.groups[static_cast<size_t>(group)].part;
  Access a = open(group, true, whole);
  math_at(group).store_from_f32(a.as<char>() + offset * static_cast<int64_t>(elem_), dtype_, src, count);
}

void ParamHome::write_from_host(int group, int64_t offset, int64_t count, const float* host_src) {
  if (count == 0) return;
  std::vector<unsigned char> rounded(static_cast<size_t>(count) * elem_);
  convert(host_src, DType::f32, rounded.data(), dtype_, static_cast<size_t>(count));
  const bool whole = offset == 0 && count == layout_.groups[static_cast<size_t>(group)].part;
  Access a = open(group, true, whole);
  char* dst = a.as<char>() + offset * static_cast<int64_t>(elem_);
  if (where_[static_cast<size_t>(group)] == Where::device)
    device_.copy_from_host(dst, rounded.data(), rounded.size());
  else
    std::memcpy(dst, rounded.data(), rounded.size());
}

bool ParamHome::prefetch(int group) {
  const size_t g = static_cast<size_t>(group);
  if (where_[g] != Where::nvme) return true;
  return swap_->prefetch(static_cast<int>(offset_[g]), layout_.groups[g].part * static_cast<int64_t>(elem_));
}

void ParamHome::flush() {
  if (swap_) swap_->flush();
}

int64_t ParamHome::swap_buffer_bytes() const {
  return swap_ ? swap_->buffer_bytes() : 0;
}

std::string ParamHome::describe() const {
  if (offload_.device == OffloadDevice::none) return "parameters on the device";
  std::string out = fmt::format("offload_param {}: {} of parameter partitions in host memory",
                                offload_device_name(offload_.device), format_bytes(host_bytes()));
  if (offload_.device == OffloadDevice::nvme && !swap_)
    out += fmt::format(" and none on NVMe: every slice is below the {} swap minimum or fits max_in_cpu ({} elements)",
                       format_bytes(std::max<int64_t>(int64_t{1} << 20, offload_.aio.block_size)), offload_.max_in_cpu);
  if (swap_)
    out += fmt::format(", {} in {} ({} host buffers of {})", format_bytes(nvme_bytes()), swap_->path(),
                       swap_->buffer_count(), format_bytes(swap_->buffer_bytes() / std::max(1, swap_->buffer_count())));
  return out;
}

}  // namespace dscpp::runtime
