#include "runtime/zero/param_store.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/zero/zeropp.h"

#include <fmt/format.h>

#include <algorithm>

namespace dscpp::runtime {

std::string describe_zeropp(const ZeroPlan& zero, const Stage3Plan& s3, int world_size, int nodes) {
  if (!zero.parameters_partitioned) return "";  // the config check refused ZeRO++ below stage 3
  if (!s3.quantized_weights && s3.hpz_partition_size <= 1 && !zero.quantized_gradients) return "";
  return fmt::format(
      "ZeRO++:{}{}{}", s3.quantized_weights ? " qwZ (parameter gathers in int8, groups of 8000-16000)" : "",
      s3.hpz_partition_size > 1
          ? fmt::format(" hpZ (secondary copies within groups of {} ranks serve the gathers until the step)",
                        s3.hpz_partition_size)
          : std::string(),
      !zero.quantized_gradients ? ""
      : nodes > 1 ? fmt::format(" qgZ (gradients reduced in int4 by two all-to-alls: inside {} nodes of {} ranks, "
                                "then across)",
                                nodes, world_size / nodes)
                  : " qgZ requested, but one node: a plain reduce-scatter, as DeepSpeed does");
}

struct ParamStore::Slot {
  DeviceBuffer buffer;      // the gathered group (stage 3)
  comm::WorkHandle gather;  // in flight until waited
};

ParamStore::ParamStore(const FlatLayout& layout, comm::Communicator& comm, Device& device, DType dtype,
                       bool partitioned, const Stage3Plan& stage3, Device* host, const ParamOffloadPlan& offload)
    : layout_(layout),
      comm_(comm),
      device_(device),
      dtype_(dtype),
      elem_(dtype_size(dtype)),
      partitioned_(partitioned),
      s3_(stage3),
      slots_(layout.groups.size()),
      persistent_(layout.groups.size(), false),
      secondary_(layout.groups.size()) {
  DSCPP_CHECK(layout.parts == 1 || layout.parts == comm.size());
  DSCPP_CHECK(host || offload.device == OffloadDevice::none);
  home_ = std::make_unique<ParamHome>(layout, comm.rank(), device, host ? *host : device, dtype, partitioned, offload);
  if (partitioned) {
    persistent_ = persistent_groups(layout, s3_);
    kept_for_reuse_ = kept_for_reuse(layout, s3_);
    const int h = s3_.hpz_partition_size;
    if (h > 1) {
      DSCPP_CHECK(comm.size() % h == 0);  // the engine names the key when it is not
      hpz_ = comm.split(comm.rank() / h, comm.rank(), "hpz");
    }
  }
}

std::vector<bool> ParamStore::regathered_in_backward(const FlatLayout& layout, const Stage3Plan& s3) {
  std::vector<bool> persistent = persistent_groups(layout, s3), kept = kept_for_reuse(layout, s3);
  std::vector<bool> out(layout.groups.size());
  for (size_t g = 0; g < out.size(); ++g) out[g] = layout.groups[g].numel > 0 && !persistent[g] && !kept[g];
  return out;
}

int64_t ParamStore::hpz_secondary_bound(const FlatLayout& layout, const Stage3Plan& s3) {
  if (s3.hpz_partition_size <= 1) return 0;
  std::vector<bool> again = regathered_in_backward(layout, s3);
  int64_t n = 0;
  for (size_t g = 0; g < again.size(); ++g)
    if (again[g]) n += layout.groups[g].numel / s3.hpz_partition_size;
  return n;
}

std::vector<bool> ParamStore::persistent_groups(const FlatLayout& layout, const Stage3Plan& s3) {
  std::vector<bool> out(layout.groups.size(), false);
  int64_t kept = 0;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    int64_t numel = layout.groups[g].numel;
    if (numel == 0 || kept + numel > s3.model_persistence_threshold) continue;
    if (numel <= s3.param_persistence_threshold) {
      out[g] = true;
      kept += numel;
    }
  }
  return out;
}

int64_t ParamStore::gathered_bound(const FlatLayout& layout, const Stage3Plan& s3) {
  // Persistent and reuse-kept groups, the group in use, and the prefetch window.
  std::vector<bool> persistent = persistent_groups(layout, s3), kept = kept_for_reuse(layout, s3);
  int64_t fixed = 0, others = 0;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    int64_t n = layout.groups[g].numel;
    if (persistent[g] || kept[g])
      fixed += n;
    else
      others += n;
  }
  // Prefetching stops at stage3_max_live_parameters (the group in use is gathered regardless);
  // the group in use may be one of the kept ones, and nothing is gathered twice: never more
  // than the whole model.
  const int64_t window =
      std::min({s3.prefetch_bucket_size, others, std::max<int64_t>(0, s3.max_live_parameters - fixed)});
  return std::min(fixed + others, fixed + layout.max_group_numel + window);
}

std::string ParamStore::gathered_reason(const FlatLayout& layout, const Stage3Plan& s3, size_t elem) {
  std::vector<bool> persistent = persistent_groups(layout, s3), kept = kept_for_reuse(layout, s3);
  int64_t fixed = 0, reused = 0, all = 0;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    all += layout.groups[g].numel;
    if (persistent[g]) fixed += layout.groups[g].numel;
    else if (kept[g]) reused += layout.groups[g].numel;
  }
  const auto bytes = [&](int64_t n) { return format_bytes(n * static_cast<int64_t>(elem)); };
  std::string out = fmt::format(
      "gathered parameters, at most: persistent {} (stage3_param_persistence_threshold), kept from forward to "
      "backward {} (stage3_max_reuse_distance {}, within stage3_max_live_parameters {}), the layer in use and "
      "the prefetch window (stage3_prefetch_bucket_size {})",
      bytes(fixed), bytes(reused), s3.max_reuse_distance, s3.max_live_parameters, s3.prefetch_bucket_size);
  if (gathered_bound(layout, s3) >= all && all > 0)
    out += fmt::format(": the whole model ({}) can be gathered at once — stage3_max_live_parameters below {} "
                       "bounds it (or a smaller stage3_max_reuse_distance)",
                       bytes(all), all);
  return out;
}

ParamStore::~ParamStore() {
  // In-flight gathers write into our buffers: let them finish before the buffers go.
  for (Slot& s : slots_)
    if (s.gather) try {
        s.gather->wait();
      } catch (...) {
      }
}

comm::WorkHandle ParamStore::start_gather(int group, void* dst, bool quantize) {
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  ++gathers_;
  // hpZ: every gather between a forward use and the step comes from the copies inside the group.
  if (const DeviceBuffer& copy = secondary_[static_cast<size_t>(group)]) {
    const int64_t n = g.numel / hpz_->size();
    return hpz_->allgather_async(copy.data(), dst, static_cast<size_t>(n), dtype_);
  }
  const void* src = owned(group);
  if (!src) {
    // An offloaded slice goes straight to its own place in the gathered buffer, and the
    // allgather runs in place from there (DeepSpeed's way; every backend supports it: test_comm_shm,
    // test_comm_gloo and tests/collectives/matrix.cpp check in-place allgather).
    char* mine = static_cast<char*>(dst) + static_cast<int64_t>(comm_.rank()) * g.part * static_cast<int64_t>(elem_);
    home_->copy_to_device(group, mine);
    src = mine;
  }
  if (quantize) return quantized_allgather(comm_, device_, src, dst, g.part, dtype_);
  return comm_.allgather_async(src, dst, static_cast<size_t>(g.part), dtype_);
}

void ParamStore::keep_secondary(int group) {
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  DeviceBuffer& copy = secondary_[static_cast<size_t>(group)];
  if (copy) return;
  const int64_t n = g.numel / hpz_->size();
  copy = DeviceBuffer(device_, static_cast<size_t>(n) * elem_, MemCategory::params);
  wait(group);
  const char* whole = static_cast<const char*>(slots_[static_cast<size_t>(group)].buffer.data());
  device_.copy(copy.data(), whole + static_cast<int64_t>(hpz_->rank()) * n * static_cast<int64_t>(elem_),
               static_cast<size_t>(n) * elem_);
}

void ParamStore::gather_to(int group, void* dst) {
  start_gather(group, dst, false)->wait();
}

void ParamStore::begin_pass(bool backward, bool training) {
  backward_ = backward;
  training_ = training;
}

void ParamStore::fetch(int group, bool quantize) {
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  Slot& s = slots_[static_cast<size_t>(group)];
  if (g.numel == 0 || s.buffer) return;
  s.buffer = DeviceBuffer(device_, static_cast<size_t>(g.numel) * elem_, MemCategory::params);
  s.gather = start_gather(group, s.buffer.data(), quantize);
  live_elements_ += g.numel;
}

void ParamStore::wait(int group) {
  Slot& s = slots_[static_cast<size_t>(group)];
  if (s.gather) {
    s.gather->wait();
    s.gather.reset();
  }
}

void ParamStore::release(int group) {
  Slot& s = slots_[static_cast<size_t>(group)];
  if (!s.buffer || persistent_[static_cast<size_t>(group)]) return;
  wait(group);
  s.buffer.reset();
  live_elements_ -= layout_.groups[static_cast<size_t>(group)].numel;
}

void ParamStore::prefetch_after(int layer, bool backward) {
  const int n = static_cast<int>(layout_.layer_range.size());
  const int here = layout_.layer_group[static_cast<size_t>(layer)];
  const bool swap_ahead = home_->offload().device == OffloadDevice::nvme;
  int64_t ahead = 0;    // elements gathered for groups not yet reached
  bool gathering = true;
  for (int l = backward ? layer - 1 : layer + 1; l >= 0 && l < n; l += backward ? -1 : 1) {
    int g = layout_.layer_group[static_cast<size_t>(l)];
    if (g == here) continue;
    int64_t numel = layout_.groups[static_cast<size_t>(g)].numel;
    if (numel == 0 || persistent_[static_cast<size_t>(g)]) continue;
    if (gathering && ahead + numel <= s3_.prefetch_bucket_size &&
        (slots_[static_cast<size_t>(g)].buffer || live_elements_ + numel <= s3_.max_live_parameters)) {
      fetch(g, s3_.quantized_weights);  // no-op when already gathered
      ahead += numel;
      continue;
    }
    // Beyond the gather window NVMe slices start their way into host buffers, as far as free
    // buffers allow: that costs host memory only, not device memory.
    gathering = false;
    if (!swap_ahead || !home_->prefetch(g)) return;
  }
}

const void* ParamStore::layer_params(int layer, bool backward, bool prefetch) {
  int64_t first = layout_.layer_range[static_cast<size_t>(layer)].first;
  if (!partitioned_) return static_cast<const char*>(full()) + first * static_cast<int64_t>(elem_);
  int group = layout_.layer_group[static_cast<size_t>(layer)];
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  if (g.numel == 0) return nullptr;
  fetch(group, s3_.quantized_weights);
  if (prefetch) prefetch_after(layer, backward);
  wait(group);
  return static_cast<const char*>(slots_[static_cast<size_t>(group)].buffer.data()) +
         (first - g.begin) * static_cast<int64_t>(elem_);
}

std::vector<bool> ParamStore::kept_for_reuse(const FlatLayout& layout, const Stage3Plan& s3) {
  // Forward is followed by backward in reverse order: between a group's forward use and its
  // backward use, every later group is used twice. Walked from the end, one pass.
  // Kept groups count towards stage3_max_live_parameters: the last ones (reused soonest) first.
  std::vector<bool> keep(layout.groups.size(), false);
  int64_t between = 0, kept = 0;
  for (size_t g = layout.groups.size(); g-- > 0;) {
    const int64_t numel = layout.groups[g].numel;
    keep[g] = between <= s3.max_reuse_distance && kept + numel <= s3.max_live_parameters;
    if (keep[g]) kept += numel;
    between += 2 * numel;
  }
  return keep;
}

void ParamStore::layer_done(int layer, bool backward) {
  if (!partitioned_) return;
  int group = layout_.layer_group[static_cast<size_t>(layer)];
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  bool group_finished = backward ? layer == g.first_layer : layer == g.end_layer - 1;
  if (!group_finished) return;
  if (!backward && training_ && kept_for_reuse_[static_cast<size_t>(group)]) return;
  if (hpz_ && !backward && training_ && !persistent_[static_cast<size_t>(group)]) keep_secondary(group);
  release(group);
}

void ParamStore::follow_forward(int first, int end) {
  if (!partitioned_) return;
  begin_pass(false, false);
  for (int l = first; l < (end < 0 ? static_cast<int>(layout_.layer_range.size()) : end); ++l) {
    layer_params(l, false);
    layer_done(l, false);
  }
}

void ParamStore::release_all() {
  for (size_t g = 0; g < slots_.size(); ++g) release(static_cast<int>(g));
}

void ParamStore::settle() {
  for (size_t g = 0; g < slots_.size(); ++g) wait(static_cast<int>(g));
}

void ParamStore::publish() {
  for (DeviceBuffer& copy : secondary_) copy.reset();  // hpZ copies hold the old weights
  std::vector<comm::WorkHandle> inflight;
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    const PartitionGroup& g = layout_.groups[i];
    if (g.numel == 0) continue;
    if (!partitioned_) {
      if (layout_.parts == 1) continue;
      char* base = static_cast<char*>(full());
      inflight.push_back(comm_.allgather_async(owned(static_cast<int>(i)), base + g.begin * static_cast<int64_t>(elem_),
                                               static_cast<size_t>(g.part), dtype_));
    } else if (persistent_[i]) {
      Slot& s = slots_[i];
      wait(static_cast<int>(i));
      if (!s.buffer) {
        fetch(static_cast<int>(i), false);
      } else {
        s.gather = start_gather(static_cast<int>(i), s.buffer.data(), false);
      }
    }
  }
  for (auto& w : inflight) w->wait();
}

}  // namespace dscpp::runtime
