// TensorSwapper: fixed-size tensor slots in one preallocated swap file, and the pool of aligned
// host buffers that tensors are swapped through (DeepSpeed's swap_tensor/).
//
//   <swap dir>/<name>.swp   slot s occupies bytes [s·slot_bytes, (s+1)·slot_bytes)
//
// The caller decides what a slot holds (an optimizer sub-group's master or one of its states,
// a stage-3 parameter partition, ...); the swapper only moves bytes and keeps the rules:
//  - The file is preallocated to its full size when the swapper is built, so a disk that is
//    too small fails at start-up (naming the file, the free space and the remedy), not after
//    hours of training; and no O_DIRECT write ever extends the file (synchronous on ext4).
//  - slot_bytes is rounded up to kDirectIoAlignment; a transfer moves round_up(bytes) bytes,
//    so the host buffer must have that capacity (pool buffers have slot_bytes).
//  - Every transfer first checks that the file is still there (DirectFile::check_present): a
//    file deleted underneath (a cleanup script, a tmp reaper) would otherwise swallow writes.
//  - A slot must not be read while a write to it is in flight; callers wait on the handle.
#pragma once

#include "offload/aligned_buffer.h"
#include "offload/async_io.h"
#include "offload/direct_file.h"
#include "offload/swap_dir.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::offload {

// A pool of equal, aligned (optionally mlock-pinned) host buffers. Not thread-safe: one owner
// hands buffers out and takes them back.
class SwapBufferPool {
 public:
  SwapBufferPool() = default;
  // `what` names the config key that sized it, for the message when the pool runs dry.
  SwapBufferPool(int count, int64_t buffer_bytes, bool pin, std::string what);

  // A free buffer's index; throws (naming `what`, the count and what is in use) when none is free.
  int acquire();
  void release(int index);
  char* data(int index) const { return buffers_.at(static_cast<size_t>(index)).data(); }
  int count() const { return static_cast<int>(buffers_.size()); }
  int free_count() const { return static_cast<int>(free_.size()); }
  int64_t buffer_bytes() const { return buffer_bytes_; }
  int64_t bytes() const { return buffer_bytes_ * count(); }
  bool pinned() const { return pinned_; }

 private:
  std::vector<AlignedBuffer> buffers_;
  std::vector<int> free_;
  int64_t buffer_bytes_ = 0;
  bool pinned_ = false;
  std::string what_;
};

class TensorSwapper {
 public:
  // Creates <dir>/<name>.swp with slot_count slots of round_up(slot_bytes) bytes, preallocated.
  TensorSwapper(AsyncIo& io, const SwapDir& dir, const std::string& name, int64_t slot_bytes, int64_t slot_count);
  TensorSwapper(const TensorSwapper&) = delete;
  TensorSwapper& operator=(const TensorSwapper&) = delete;

  // Asynchronous transfers of round_up(bytes) bytes between `buf` and slot `slot`; bytes ≤
  // slot_bytes(). The buffer must stay alive and untouched until the handle's wait() returns.
  IoHandle swap_out(int64_t slot, const void* buf, int64_t bytes);
  IoHandle swap_in(int64_t slot, void* buf, int64_t bytes);

  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t slot_count() const { return slot_count_; }
  int64_t file_bytes() const { return slot_bytes_ * slot_count_; }
  const std::string& path() const { return file_.path(); }
  // Bytes moved so far in each direction (requests submitted).
  int64_t bytes_written() const { return written_; }
  int64_t bytes_read() const { return read_; }

 private:
  int64_t checked_offset(const char* op, int64_t slot, int64_t bytes) const;

  AsyncIo& io_;
  DirectFile file_;
  int64_t slot_bytes_ = 0;
  int64_t slot_count_ = 0;
  int64_t written_ = 0, read_ = 0;
};

}  // namespace dscpp::offload
