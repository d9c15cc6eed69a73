// One worker thread of AsyncIo with its own kernel queue (io_uring ring or libaio context).
// It cuts its slice of each request into block_size pieces and keeps the queue busy according
// to DeepSpeed's aio semantics: overlap_events (refill as pieces complete, or whole batches)
// and single_submit (one submit per piece, or one per batch). This is the only place those
// rules live; the backends only queue and reap.
#pragma once

#include "offload/aio_options.h"
#include "offload/io_queue.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dscpp::offload {

class IoOp;

// A contiguous part of an op, at most block_size bytes; after a short transfer, what is left.
struct IoPiece {
  IoOp* op = nullptr;
  char* buf = nullptr;
  int64_t bytes = 0;
  int64_t offset = 0;
};

class IoWorker {
 public:
  IoWorker(std::unique_ptr<IoQueue> queue, const AioOptions& options);
  ~IoWorker();  // runs every queued piece to completion, then joins the thread

  // Queues [buf, buf + bytes) at file `offset` of `op`, cut into piece_count(bytes) pieces;
  // each ends with op->piece_done() or op->piece_failed().
  void enqueue(IoOp* op, char* buf, int64_t bytes, int64_t offset);
  int64_t piece_count(int64_t bytes) const { return (bytes + block_size_ - 1) / block_size_; }

 private:
  void run();
  void fill();                              // stage ready pieces into free slots and submit
  void complete(const IoCompletion& done);  // account one kernel completion
  void release(IoPiece* slot) { free_.push_back(slot); }
  void fail_all(const std::string& message);  // the queue broke: fail everything held

  const int64_t block_size_;
  const bool single_submit_;
  const bool overlap_events_;
  std::unique_ptr<IoQueue> queue_;

  // Shared with submitters.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoPiece> incoming_;
  bool stop_ = false;

  // Owned by the worker thread.
  std::vector<IoPiece> slots_;  // queue_depth pieces the kernel may hold (stable addresses)
  std::vector<IoPiece*> free_;
  std::deque<IoPiece> ready_;  // taken from incoming_, waiting for a slot
  std::vector<IoCompletion> completions_;
  int inflight_ = 0;
  std::string broken_;  // set when the queue failed: later pieces fail with this message

  std::thread thread_;
};

}  // namespace dscpp::offload
