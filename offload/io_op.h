// One read or write submitted to AsyncIo: the pieces still outstanding, the first failure, and
// the wake-up of whoever waits for it. Internal to offload/ (users hold an IoHandle).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace dscpp::offload {

// AsyncIo's count of requests not yet finished and of those finished since the last
// wait_all(), with the first failure among them.
struct OpTracker {
  std::mutex mu;
  std::condition_variable cv;
  int64_t outstanding = 0;
  int64_t finished = 0;
  std::string first_error;
};

class IoOp {
 public:
  IoOp(int fd, std::string path, char* buf, int64_t bytes, int64_t offset, bool write, OpTracker* tracker);

  // Called once per piece, by the worker that owned it. The last call finishes the op: it
  // checks that a written file still exists, wakes waiters and releases the op's self-reference.
  void piece_done();
  // Records `message` (the first one wins) and counts the piece as finished.
  void piece_failed(std::string message);
  // Messages for a piece's kernel error (-errno), a read that hit the end of the file, and a
  // write the filesystem stopped short.
  std::string describe_error(int err, int64_t piece_offset, int64_t piece_bytes) const;
  std::string describe_eof(int64_t at) const;
  std::string describe_short_write(int64_t piece_offset, int64_t piece_bytes, int64_t written) const;
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  // Arms the op with `pieces` pieces and keeps it alive (self-reference) until they finish.
  void start(int64_t pieces, std::shared_ptr<IoOp> self);
  int64_t wait();  // bytes moved; throws dscpp::Error with the failure
  bool done() const;

  const int fd;
  const std::string path;
  char* const buf;
  const int64_t bytes;
  const int64_t offset;
  const bool write;

 private:
  void finish_piece();
  std::string what() const;  // "aio write of 4.00 MiB at offset 0 to /x/y"

  OpTracker* tracker_;
  std::atomic<int64_t> pieces_left_{0};
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
  std::shared_ptr<IoOp> self_;
};

}  // namespace dscpp::offload
