#include "collectives/memory_staging.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace dscpp::comm {

void copy_between(Device* device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const bool to_device = device != nullptr && device->holds(dst);
  const bool from_device = device != nullptr && device->holds(src);
  if (to_device && from_device)
    device->copy(dst, src, bytes);  // ordered before later work on the device's stream
  else if (from_device)
    device->copy_to_host(dst, src, bytes);
  else if (to_device)
    device->copy_from_host(dst, src, bytes);
  else
    std::memmove(dst, src, bytes);
}

MemoryStaging::MemoryStaging(const GroupContext& context, Memory engine)
    : device_(context.device_memory != nullptr && !context.device_memory->is_host() ? context.device_memory : nullptr),
      engine_(engine),
      home_(engine == Memory::device ? device_ : context.host_memory),
      bound_(std::max<size_t>(context.staging_bytes, 64)) {}

bool MemoryStaging::needed(const OpDesc& op) const {
  if (device_ == nullptr || engine_ == Memory::either || op.kind == OpKind::barrier) return false;
  const bool want_device = engine_ == Memory::device;
  return (op.input != nullptr && device_->holds(op.input) != want_device) ||
         (op.output != nullptr && device_->holds(op.output) != want_device);
}

char* MemoryStaging::area(size_t bytes) {
  if (home_ == nullptr) fail("internal: a group with device buffers was given no host memory to stage them through");
  if (area_.bytes() < bytes) {
    area_.reset();  // the old area goes first: the bound is on what is held at once
    area_ = DeviceBuffer(*home_, bytes, MemCategory::buffers);
  }
  return area_.as<char>();
}

void MemoryStaging::run(const OpDesc& op, int size, const std::function<void(const OpDesc&)>& run) {
  const size_t elem = dtype_size(op.dtype), n = static_cast<size_t>(size);
  // Elements of each rank's slice per piece, and the area a piece needs in slices of that size.
  size_t slices = 1;
  switch (op.kind) {
    case OpKind::allreduce:
    case OpKind::broadcast: slices = 1; break;
    case OpKind::reduce_scatter:
    case OpKind::allgather: slices = n + 1; break;
    case OpKind::all_to_all: slices = 2 * n; break;
    case OpKind::barrier: return run(op);
  }
  const size_t piece = std::min(op.count, std::max<size_t>(1, bound_ / (slices * elem)));
  char* const base = area(slices * piece * elem);
  const auto* in = static_cast<const char*>(op.input);
  auto* out = static_cast<char*>(op.output);
  const size_t slice_bytes = op.count * elem;  // a rank's slice of a whole buffer
  for (size_t at = 0; at < op.count; at += piece) {
    const size_t len = std::min(piece, op.count - at), bytes = len * elem, offset = at * elem;
    OpDesc staged = op;
    staged.count = len;
    switch (op.kind) {
      case OpKind::allreduce:
      case OpKind::broadcast:  // in place
        copy_between(device_, base, in + offset, bytes);
        staged.input = staged.output = base;
        run(staged);
        copy_between(device_, out + offset, base, bytes);
        break;
      case OpKind::reduce_scatter:  // input: every rank's slice; output: ours
        for (size_t r = 0; r < n; ++r) copy_between(device_, base + r * bytes, in + r * slice_bytes + offset, bytes);
        staged.input = base;
        staged.output = base + n * bytes;
        run(staged);
        copy_between(device_, out + offset, base + n * bytes, bytes);
        break;
      case OpKind::allgather:  // in place too: our input piece is read before any output is written
        copy_between(device_, base, in + offset, bytes);
        staged.input = base;
        staged.output = base + bytes;
        run(staged);
        for (size_t r = 0; r < n; ++r)
          copy_between(device_, out + r * slice_bytes + offset, base + (r + 1) * bytes, bytes);
        break;
      case OpKind::all_to_all:
        for (size_t r = 0; r < n; ++r) copy_between(device_, base + r * bytes, in + r * slice_bytes + offset, bytes);
        staged.input = base;
        staged.output = base + n * bytes;
        run(staged);
        for (size_t r = 0; r < n; ++r)
          copy_between(device_, out + r * slice_bytes + offset, base + (n + r) * bytes, bytes);
        break;
      case OpKind::barrier: break;
    }
  }
}

}  // namespace dscpp::comm
