#include "offload/io_worker.h"

#include "core/error.h"
#include "offload/aligned_buffer.h"
#include "offload/io_op.h"

#include <algorithm>
#include <cerrno>

namespace dscpp::offload {

IoWorker::IoWorker(std::unique_ptr<IoQueue> queue, const AioOptions& o)
    : block_size_(o.block_size),
      single_submit_(o.single_submit),
      overlap_events_(o.overlap_events),
      queue_(std::move(queue)),
      slots_(static_cast<size_t>(o.queue_depth)),
      completions_(static_cast<size_t>(o.queue_depth)) {
  for (auto& s : slots_) free_.push_back(&s);
  thread_ = std::thread([this] { run(); });
}

IoWorker::~IoWorker() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void IoWorker::enqueue(IoOp* op, char* buf, int64_t bytes, int64_t offset) {
  {
    std::lock_guard lk(mu_);
    for (int64_t at = 0; at < bytes; at += block_size_)
      incoming_.push_back({op, buf + at, std::min(block_size_, bytes - at), offset + at});
  }
  cv_.notify_one();
}

void IoWorker::run() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      // With pieces in flight the thread blocks in reap() instead; new work is picked up at
      // the next completion, so the queue never sits idle while there is work.
      if (inflight_ == 0 && ready_.empty()) cv_.wait(lk, [&] { return stop_ || !incoming_.empty(); });
      if (stop_ && incoming_.empty() && ready_.empty() && inflight_ == 0) return;
      while (!incoming_.empty()) {
        ready_.push_back(incoming_.front());
        incoming_.pop_front();
      }
    }
    if (!broken_.empty()) {
      fail_all(broken_);
      continue;
    }
    try {
      fill();
      if (inflight_ == 0) continue;
      // overlap_events: reap at least one and refill at once; otherwise the whole batch.
      int n = queue_->reap(overlap_events_ ? 1 : inflight_, completions_.data(), static_cast<int>(slots_.size()));
      for (int i = 0; i < n; ++i) complete(completions_[static_cast<size_t>(i)]);
    } catch (const std::exception& e) {
      broken_ = fmt::format("{} queue failed: {}", queue_->name(), e.what());
      fail_all(broken_);
    }
  }
}

void IoWorker::fill() {
  if (!overlap_events_ && inflight_ > 0) return;
  int staged = 0;
  while (!free_.empty() && !ready_.empty()) {
    IoPiece piece = ready_.front();
    ready_.pop_front();
    // Once a request has failed (e.g. disk full) its remaining pieces are not issued.
    if (piece.op->failed()) {
      piece.op->piece_done();
      continue;
    }
    IoPiece* slot = free_.back();
    free_.pop_back();
    *slot = piece;
    queue_->prepare({slot, piece.op->fd, piece.buf, piece.bytes, piece.offset, piece.op->write});
    ++inflight_;
    ++staged;
    if (single_submit_) queue_->submit();
  }
  if (staged > 0 && !single_submit_) queue_->submit();
}

void IoWorker::complete(const IoCompletion& c) {
  IoPiece* slot = c.piece;
  IoPiece piece = *slot;
  release(slot);
  --inflight_;
  IoOp* op = piece.op;
  if (c.result < 0) {
    op->piece_failed(op->describe_error(static_cast<int>(-c.result), piece.offset, piece.bytes));
  } else if (c.result == piece.bytes) {
    op->piece_done();
  } else if (c.result == 0 || !is_aligned(c.result)) {
    // Nothing moved, or a transfer that stops mid-block: for a read only the end of the file
    // does that (AsyncIo refuses reads past the size it sees at submission, so the file
    // shrank); for a write the filesystem gave up (usually full).
    if (op->write)
      op->piece_failed(op->describe_short_write(piece.offset, piece.bytes, c.result));
    else
      op->piece_failed(op->describe_eof(piece.offset + c.result));
  } else {
    // A short but block-aligned transfer: issue the rest first, ahead of newer pieces.
    piece.buf += c.result;
    piece.offset += c.result;
    piece.bytes -= c.result;
    ready_.push_front(piece);
  }
}

void IoWorker::fail_all(const std::string& message) {
  // The queue is unusable. Destroying it waits for (or cancels) what the kernel still holds,
  // after which every piece this worker knows of fails with the message.
  queue_.reset();
  for (auto& slot : slots_) {
    if (std::find(free_.begin(), free_.end(), &slot) != free_.end()) continue;
    slot.op->piece_failed(message);
    free_.push_back(&slot);
  }
  inflight_ = 0;
  while (!ready_.empty()) {
    ready_.front().op->piece_failed(message);
    ready_.pop_front();
  }
}

}  // namespace dscpp::offload
