#include "offload/io_op.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "offload/direct_file.h"

#include <fmt/core.h>

#include <cerrno>

namespace dscpp::offload {

IoOp::IoOp(int fd_, std::string path_, char* buf_, int64_t bytes_, int64_t offset_, bool write_, OpTracker* tracker)
    : fd(fd_), path(std::move(path_)), buf(buf_), bytes(bytes_), offset(offset_), write(write_), tracker_(tracker) {}

std::string IoOp::what() const {
  return fmt::format("aio {} of {} at offset {} {} {}", write ? "write" : "read", format_bytes(bytes), offset,
                     write ? "to" : "from", path);
}

std::string IoOp::describe_error(int err, int64_t piece_offset, int64_t piece_bytes) const {
  return fmt::format("{} failed (piece of {} at offset {}): {}", what(), format_bytes(piece_bytes), piece_offset,
                     describe_errno(err, path));
}

std::string IoOp::describe_eof(int64_t at) const {
  return fmt::format(
      "{} failed: the file ends at byte {} (read past end of file; was it truncated or replaced "
      "underneath the job?)",
      what(), at);
}

std::string IoOp::describe_short_write(int64_t piece_offset, int64_t piece_bytes, int64_t written) const {
  // The kernel cut the write mid-block and O_DIRECT cannot resume there; a full disk is the
  // usual cause, so say so with the free space.
  return fmt::format("{} failed: the piece of {} at offset {} stopped after {} bytes, probably: {}", what(),
                     format_bytes(piece_bytes), piece_offset, written, describe_errno(ENOSPC, path));
}

void IoOp::start(int64_t pieces, std::shared_ptr<IoOp> self) {
  pieces_left_.store(pieces);
  self_ = std::move(self);
  {
    std::lock_guard lk(tracker_->mu);
    ++tracker_->outstanding;
  }
}

void IoOp::piece_done() {
  finish_piece();
}

void IoOp::piece_failed(std::string message) {
  {
    std::lock_guard lk(mu_);
    if (error_.empty()) error_ = std::move(message);
  }
  failed_.store(true);
  finish_piece();
}

void IoOp::finish_piece() {
  if (pieces_left_.fetch_sub(1) != 1) return;
  // Last piece. A write into a file unlinked meanwhile "succeeds" into an orphaned inode;
  // report it here, once per request, rather than let the data vanish silently.
  std::string removed = write && !failed() ? removed_underneath(fd, path) : "";
  std::shared_ptr<IoOp> keep = std::move(self_);  // the op outlives the notifications below
  std::string error;
  {
    std::lock_guard lk(mu_);
    if (error_.empty() && !removed.empty()) error_ = removed;
    error = error_;
    done_ = true;
  }
  cv_.notify_all();
  // Notify under the lock: once `outstanding` reaches 0 AsyncIo may destroy the tracker.
  std::lock_guard lk(tracker_->mu);
  --tracker_->outstanding;
  ++tracker_->finished;
  if (tracker_->first_error.empty()) tracker_->first_error = error;
  tracker_->cv.notify_all();
}

int64_t IoOp::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  if (!error_.empty()) throw Error(error_);
  return bytes;
}

bool IoOp::done() const {
  std::lock_guard lk(mu_);
  return done_;
}

}  // namespace dscpp::offload
