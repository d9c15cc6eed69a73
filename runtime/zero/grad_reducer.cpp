#include "runtime/zero/grad_reducer.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "kernels/device_math.h"
#include "runtime/zero/zeropp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace dscpp::runtime {

namespace {

// qgZ's two-hop reduce-scatter runs: more than one node of whole nodes.
bool qgz_active(const GradReduceOptions& o, int world) {
  const int per_node = std::max(1, o.ranks_per_node);
  return o.quantized_gradients && world > per_node && world % per_node == 0;
}

// What each staging entry holds (GradReducer::Staging), by the one rule the constructor and
// the memory plan share.
struct StagingShape {
  int count = 0;                  // entries
  bool buffer = false, out = false, wire = false;
};
StagingShape staging_shape(DType dtype, const GradReduceOptions& o, int world) {
  StagingShape s;
  if (o.reduction == GradReduction::allreduce) return s;
  const bool into_partition = o.reduction == GradReduction::into_partition;
  s.count = !into_partition || o.overlap ? 2 : 1;
  s.buffer = into_partition;
  s.wire = o.comm_dtype.value_or(dtype) != dtype;
  // The reduce-scatter cannot write straight into its destination: stage 1's own slice of the
  // whole array (the input), a partition it adds to or converts into, or one off the device.
  const bool crosses = o.partition_device != nullptr && !o.device_is_host;
  s.out = qgz_active(o, world) || (o.reduce_scatter && (!into_partition || o.accumulates || s.wire || crosses));
  return s;
}

// pre_scale / post_scale: DeepSpeed skips a factor of 1, which this need not launch either.
void scale(Device& where, void* x, DType type, double factor, int64_t n) {
  if (factor != 1.0) kernels::math_of(where).scale_inplace(x, type, static_cast<float>(factor), n);
}

int64_t max_part(const FlatLayout& layout) {
  int64_t m = 0;
  for (const PartitionGroup& g : layout.groups) m = std::max(m, g.part);
  return m;
}

}  // namespace

GradReduceOptions reduce_options_for(const TrainPlan& plan, const ZeroPlan& zero, bool device_is_host,
                                     int ranks_per_node, Device* partition_device) {
  GradReduceOptions r;
  r.reduction = zero.reduction;
  r.bucket_elements = zero.reduce_bucket_elements;
  r.pre_scale = plan.gradients.scaling.pre;
  r.post_scale = plan.gradients.scaling.post;
  r.reduce_scatter = zero.reduce_scatter;
  r.overlap = zero.overlap_comm;
  r.accumulates = plan.batch.gas > 1;
  r.release_staging = zero.parameters_partitioned && zero.reduction == GradReduction::into_partition;
  r.device_is_host = device_is_host;
  r.quantized_gradients = zero.quantized_gradients;
  r.ranks_per_node = std::max(1, ranks_per_node);
  r.partition_device = partition_device;
  r.comm_dtype = plan.precision.wire;
  return r;
}

int64_t GradReducer::buffer_bytes(const FlatLayout& layout, DType dtype, const GradReduceOptions& o, int world) {
  const StagingShape s = staging_shape(dtype, o, world);
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  const auto wire = static_cast<int64_t>(dtype_size(o.comm_dtype.value_or(dtype)));
  return s.count * ((s.buffer ? layout.max_group_numel * elem : 0) + (s.out ? max_part(layout) * wire : 0) +
                    (s.wire ? layout.max_group_numel * wire : 0));
}

std::string GradReducer::buffer_reason(const FlatLayout& layout, DType dtype, const GradReduceOptions& o, int world) {
  const StagingShape s = staging_shape(dtype, o, world);
  if (s.count == 0) return "";
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  const auto wire = static_cast<int64_t>(dtype_size(o.comm_dtype.value_or(dtype)));
  std::vector<std::string> parts;
  bool per_layer = true;  // stage 3's grouping
  for (const PartitionGroup& g : layout.groups) per_layer = per_layer && g.end_layer - g.first_layer == 1;
  const std::string groups = per_layer ? fmt::format("{} groups, a layer each", layout.groups.size())
                                       : fmt::format("{} groups, each at most reduce_bucket_size, "
                                                     "allgather_bucket_size, 1/{} of the model or one layer",
                                                     layout.groups.size(), kModelGroups);
  if (s.buffer)
    parts.push_back(fmt::format("the largest group's gradients ({}: {})", format_bytes(layout.max_group_numel * elem),
                                groups));
  if (s.out)
    parts.push_back(fmt::format(
        "{} reduce-scatter result ({}{})", s.buffer ? "its" : "a group's", format_bytes(max_part(layout) * wire),
        s.buffer ? ": gradient accumulation, communication_data_type or offload add it in"
                 : fmt::format(": stage 1's slice of the whole array is the input; {}", groups)));
  if (s.wire)
    parts.push_back(
        fmt::format("its copy in communication_data_type ({})", format_bytes(layout.max_group_numel * wire)));
  const std::string why = o.reduction == GradReduction::into_whole_array ? "two groups in flight"
                          : s.count == 2 ? "overlap_comm: one reduces while the next computes"
                                         : "overlap_comm false";
  return fmt::format("gradient reduction, {} × ({}) [{}]", s.count, fmt::join(parts, " + "), why);
}

struct GradReducer::Staging {
  DeviceBuffer buffer;  // one group's gradients, full length
  DeviceBuffer wire;    // the group in the communication dtype, when it differs
  DeviceBuffer out;     // reduce-scatter result (communication dtype) when it cannot go straight into the partition
  int group = -1;
  comm::WorkHandle work;
  bool direct = false;  // the result went straight into the partition
};

GradReducer::GradReducer(comm::Communicator& comm, const FlatLayout& layout, Device& device, DType dtype,
                         const GradReduceOptions& options)
    : comm_(comm),
      layout_(layout),
      device_(device),
      dtype_(dtype),
      wire_(options.comm_dtype.value_or(dtype)),
      elem_(dtype_size(dtype)),
      wire_elem_(dtype_size(wire_)),
      opt_(options),
      post_scale_(options.post_scale.value_or(
          options.reduction == GradReduction::allreduce ? 1.0 / static_cast<double>(comm.size()) : 1.0)) {
  DSCPP_CHECK_EQ(layout.parts, opt_.reduction == GradReduction::allreduce ? 1 : comm.size());
  if (opt_.reduction != GradReduction::into_partition)
    full_ = DeviceBuffer(device, static_cast<size_t>(layout.total) * elem_, MemCategory::grads, true);
  else {
    if (opt_.partition_device)
      split_ = opt_.partition_device_elements < 0 ? layout.part_total
                                                  : std::min(opt_.partition_device_elements, layout.part_total);
    if (split_ > 0)
      off_partition_ =
          DeviceBuffer(*opt_.partition_device, static_cast<size_t>(split_) * elem_, MemCategory::grads, true);
    if (split_ < layout.part_total)
      partition_ =
          DeviceBuffer(device, static_cast<size_t>(layout.part_total - split_) * elem_, MemCategory::grads, true);
  }
  if (split_ > 0 && !device.is_host()) {
    int64_t widest = 0;  // of the groups whose slices cross
    for (const PartitionGroup& g : layout.groups)
      if (g.part_offset < split_) widest = std::max(widest, g.part);
    host_staging_ =
        DeviceBuffer(*opt_.partition_device, static_cast<size_t>(widest) * wire_elem_, MemCategory::buffers);
  }
  const int per_node = std::max(1, opt_.ranks_per_node);
  if (qgz_active(opt_, comm.size())) {
    qgz_node_ = comm.split(comm.rank() / per_node, comm.rank(), "qgz-node");
    qgz_cross_ = comm.split(comm.rank() % per_node, comm.rank(), "qgz-cross");
  }
  opt_.device_is_host = device.is_host();  // the device's word over the caller's (the plan asks the same device)
  staging_.resize(static_cast<size_t>(staging_shape(dtype_, opt_, comm.size()).count));
  if (!opt_.release_staging) allocate_staging();
}

void GradReducer::allocate_staging() {
  const StagingShape shape = staging_shape(dtype_, opt_, comm_.size());
  const auto group_bytes = static_cast<size_t>(layout_.max_group_numel);
  for (Staging& s : staging_) {
    // Released staging grows per group instead (layer_grads): the first groups of backward are
    // often small ones (the head) while every kept parameter is still gathered.
    if (shape.buffer && !opt_.release_staging)
      s.buffer = DeviceBuffer(device_, group_bytes * elem_, MemCategory::buffers);
    if (shape.out)
      s.out = DeviceBuffer(device_, static_cast<size_t>(max_part(layout_)) * wire_elem_, MemCategory::buffers);
    if (shape.wire) s.wire = DeviceBuffer(device_, group_bytes * wire_elem_, MemCategory::buffers);
  }
}

void* GradReducer::owned(int group) const {
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  switch (opt_.reduction) {
    case GradReduction::allreduce:
      return at(full_, g.begin);
    case GradReduction::into_whole_array:
      return at(full_, g.owned_begin(comm_.rank()));
    case GradReduction::into_partition:
      break;
  }
  return partition_at(g.part_offset);
}

Device& GradReducer::owned_device(int group) const {
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  return opt_.reduction == GradReduction::into_partition && g.part_offset < split_ ? *opt_.partition_device : device_;
}

bool GradReducer::crosses(int group) const {
  return !device_.is_host() && &owned_device(group) != &device_;
}

GradReducer::~GradReducer() {
  auto quiet = [](const comm::WorkHandle& w) {
    if (w) try {
        w->wait();
      } catch (...) {
      }
  };
  for (Bucket& b : inflight_) quiet(b.work);
  for (Staging& s : staging_) quiet(s.work);
}

void GradReducer::begin_micro(bool first, bool last) {
  first_ = first;
  last_ = last;
  reductions_ = 0;
  current_ = -1;
  pending_end_ = layout_.total;
}

void* GradReducer::layer_grads(int layer) {
  int64_t at = layout_.layer_range[static_cast<size_t>(layer)].first;
  if (opt_.reduction != GradReduction::into_partition) return this->at(full_, at);
  int group = layout_.layer_group[static_cast<size_t>(layer)];
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  if (current_ < 0 || staging_[static_cast<size_t>(current_)].group != group) {
    if (current_ < 0 && opt_.release_staging) allocate_staging();
    current_ = (current_ + 1) % static_cast<int>(staging_.size());
    Staging& s = staging_[static_cast<size_t>(current_)];
    if (s.work) finish(s);
    const auto bytes = static_cast<size_t>(g.numel) * elem_;
    if (s.buffer.bytes() < bytes) {
      s.buffer.reset();  // before the new one: never both
      s.buffer = DeviceBuffer(device_, bytes, MemCategory::buffers);
    }
    device_.zero(s.buffer.data(), bytes);
    s.group = group;
  }
  return this->at(staging_[static_cast<size_t>(current_)].buffer, at - g.begin);
}

void GradReducer::launch_bucket(int64_t begin, int64_t end) {
  if (end <= begin) return;
  ++reductions_;
  if (comm_.size() == 1) return;
  Bucket b;
  b.begin = begin;
  b.end = end;
  void* send = at(full_, begin);
  if (wire_ != dtype_) {
    b.wire = DeviceBuffer(device_, static_cast<size_t>(end - begin) * wire_elem_, MemCategory::buffers);
    kernels::math_of(device_).convert_into(b.wire.data(), wire_, send, dtype_, end - begin);
    send = b.wire.data();
  }
  scale(device_, send, wire_, opt_.pre_scale, end - begin);
  b.work = comm_.allreduce_async(send, static_cast<size_t>(end - begin), wire_);
  inflight_.push_back(std::move(b));
}

void GradReducer::launch_group(int group, void* input) {
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  ++reductions_;
  if (opt_.reduction ==
      GradReduction::into_whole_array) {  // no staging buffer in backward: take the next result buffer here
    current_ = (current_ + 1) % static_cast<int>(staging_.size());
    if (staging_[static_cast<size_t>(current_)].work) finish(staging_[static_cast<size_t>(current_)]);
    staging_[static_cast<size_t>(current_)].group = group;
  }
  Staging& s = staging_[static_cast<size_t>(current_)];
  const bool converted = wire_ != dtype_;
  if (converted) {
    kernels::math_of(device_).convert_into(s.wire.data(), wire_, input, dtype_, g.numel);
    input = s.wire.data();
  }
  scale(device_, input, wire_, opt_.pre_scale, g.numel);
  // Nothing there to add to yet; and the collective can write there.
  const bool into_partition =
      opt_.reduction == GradReduction::into_partition && first_ && !converted && !crosses(group);
  if (qgz_node_) {
    s.direct = false;
    s.work = quantized_reduce_scatter(*qgz_node_, *qgz_cross_, device_, input, s.out.data(), g.part, wire_);
  } else if (opt_.reduce_scatter) {
    s.direct = into_partition;
    DSCPP_CHECK(s.direct || s.out);  // staging_shape: no result buffer only when it is never needed
    s.work = comm_.reduce_scatter_async(input, into_partition ? partition_at(g.part_offset) : s.out.data(),
                                        static_cast<size_t>(g.part), wire_);
  } else {
    s.direct = opt_.reduction == GradReduction::into_whole_array &&
               !converted;  // in place in the whole array: the own slice is already there
    s.work = comm_.allreduce_async(input, static_cast<size_t>(g.numel), wire_);
  }
}

void GradReducer::finish(Staging& s) {
  s.work->wait();
  s.work.reset();
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(s.group)];
  if (s.direct) {
    scale(owned_device(s.group), owned(s.group), dtype_, post_scale_, g.part);  // dtype_ is the wire's
  } else {
    // Where the reduced own slice is: the reduce-scatter output, or the rank's slice of the
    // allreduced group (wire buffer when converted, staging buffer otherwise).
    const int64_t mine = g.part * comm_.rank() * static_cast<int64_t>(wire_elem_);
    void* src = opt_.reduce_scatter || qgz_node_ ? s.out.data()
                : wire_ != dtype_                ? static_cast<void*>(s.wire.as<char>() + mine)
                                                 : static_cast<void*>(s.buffer.as<char>() + mine);
    scale(device_, src, wire_, post_scale_, g.part);  // src is this reducer's scratch
    void* dst = owned(s.group);
    Device* where = &device_;
    if (crosses(s.group)) {  // the reduced slice crosses to the host, where it is summed
      device_.copy_to_host(host_staging_.data(), src, static_cast<size_t>(g.part) * wire_elem_);
      src = host_staging_.data();
      where = opt_.partition_device;
    }
    kernels::DeviceMath& math = kernels::math_of(*where);
    if (first_ ||
        opt_.reduction == GradReduction::into_whole_array)  // stage 1 reduces the accumulated sum once: replace
      math.convert_into(dst, dtype_, src, wire_, g.part);
    else
      math.add_into(dst, dtype_, src, wire_, g.part);
  }
  s.group = -1;
}

void GradReducer::layer_done(int layer) {
  int64_t ready = layout_.layer_range[static_cast<size_t>(layer)].first;
  if (opt_.reduction == GradReduction::allreduce) {
    if (last_ && pending_end_ - ready > opt_.bucket_elements) {
      launch_bucket(ready, pending_end_);
      pending_end_ = ready;
    }
    return;
  }
  int group = layout_.layer_group[static_cast<size_t>(layer)];
  const PartitionGroup& g = layout_.groups[static_cast<size_t>(group)];
  if (layer != g.first_layer || g.numel == 0) return;  // the group's backward is not complete yet
  if (opt_.reduction == GradReduction::into_whole_array) {
    if (last_) launch_group(group, at(full_, g.begin));
  } else {
    launch_group(group, staging_[static_cast<size_t>(current_)].buffer.data());  // current_: this group's staging
  }
}

void GradReducer::end_micro() {
  if (opt_.reduction != GradReduction::allreduce) {
    for (Staging& s : staging_)
      if (s.work) finish(s);
    if (opt_.release_staging)
      for (Staging& s : staging_) s.buffer.reset(), s.out.reset(), s.wire.reset();
    return;
  }
  if (!last_) return;
  launch_bucket(0, pending_end_);
  pending_end_ = 0;
  for (Bucket& b : inflight_) {
    b.work->wait();
    void* dst = at(full_, b.begin);
    scale(device_, b.wire ? b.wire.data() : dst, wire_, post_scale_, b.end - b.begin);
    if (b.wire) kernels::math_of(device_).convert_into(dst, dtype_, b.wire.data(), wire_, b.end - b.begin);
  }
  inflight_.clear();
}

void GradReducer::zero() {
  if (full_) device_.zero(full_.data(), full_.bytes());
}

}  // namespace dscpp::runtime
