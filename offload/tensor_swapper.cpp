#include "offload/tensor_swapper.h"

#include "core/byte_size.h"
#include "core/error.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace dscpp::offload {

SwapBufferPool::SwapBufferPool(int count, int64_t buffer_bytes, bool pin, std::string what)
    : buffer_bytes_(round_up(buffer_bytes, kDirectIoAlignment)), pinned_(pin), what_(std::move(what)) {
  if (count <= 0) fail("{}: the swap buffer pool needs at least 1 buffer, got {}", what_, count);
  buffers_.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) buffers_.emplace_back(buffer_bytes_, AlignedBufferOptions{.zero = true, .lock = pin});
  // Handed out lowest index first, which keeps a run's buffer use reproducible.
  for (int i = count - 1; i >= 0; --i) free_.push_back(i);
}

int SwapBufferPool::acquire() {
  if (free_.empty())
    fail("{}: all {} swap buffers of {} are in use; raise {} (each buffer holds one swapped tensor)", what_,
         buffers_.size(), format_bytes(buffer_bytes_), what_);
  int i = free_.back();
  free_.pop_back();
  return i;
}

void SwapBufferPool::release(int index) {
  DSCPP_CHECK(index >= 0 && index < count());
  DSCPP_CHECK(std::find(free_.begin(), free_.end(), index) == free_.end());  // released twice
  free_.push_back(index);
}

TensorSwapper::TensorSwapper(AsyncIo& io, const SwapDir& dir, const std::string& name, int64_t slot_bytes,
                             int64_t slot_count)
    : io_(io), slot_bytes_(round_up(std::max<int64_t>(slot_bytes, 1), kDirectIoAlignment)), slot_count_(slot_count) {
  if (slot_bytes <= 0 || slot_count <= 0)
    fail("tensor swapper {}: needs a positive slot size and count, got {} slots of {} bytes", name, slot_count,
         slot_bytes);
  file_ = DirectFile(dir.file(name + ".swp"), OpenMode::read_write);
  file_.preallocate(file_bytes());
  // Where fallocate is unsupported the file must still span every slot: reading a slot that
  // was never written is then a read of zeros, not a read past the end.
  if (file_.size() < file_bytes() && ::ftruncate(file_.fd(), file_bytes()) != 0)
    fail("cannot size {} to {}: {}", file_.path(), format_bytes(file_bytes()), describe_errno(errno, file_.path()));
}

int64_t TensorSwapper::checked_offset(const char* op, int64_t slot, int64_t bytes) const {
  if (slot < 0 || slot >= slot_count_)
    fail("swap {} on {}: slot {} does not exist (the file has {} slots)", op, file_.path(), slot, slot_count_);
  if (bytes <= 0 || round_up(bytes, kDirectIoAlignment) > slot_bytes_)
    fail("swap {} on {}: {} bytes do not fit a slot of {} bytes", op, file_.path(), bytes, slot_bytes_);
  return slot * slot_bytes_;
}

IoHandle TensorSwapper::swap_out(int64_t slot, const void* buf, int64_t bytes) {
  const int64_t offset = checked_offset("out", slot, bytes);
  const int64_t n = round_up(bytes, kDirectIoAlignment);
  written_ += n;
  return io_.write(file_, buf, n, offset);  // AsyncIo checks that the file is still present
}

IoHandle TensorSwapper::swap_in(int64_t slot, void* buf, int64_t bytes) {
  const int64_t offset = checked_offset("in", slot, bytes);
  const int64_t n = round_up(bytes, kDirectIoAlignment);
  read_ += n;
  return io_.read(file_, buf, n, offset);
}

}  // namespace dscpp::offload
