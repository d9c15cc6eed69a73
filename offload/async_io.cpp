#include "offload/async_io.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "offload/aligned_buffer.h"
#include "offload/io_op.h"
#include "offload/io_worker.h"

namespace dscpp::offload {

int64_t IoHandle::wait() {
  if (!op_) fail("aio: wait() on an empty IoHandle (no request was submitted through it)");
  return op_->wait();
}

bool IoHandle::done() const {
  return op_ && op_->done();
}

AsyncIo::AsyncIo(const AioOptions& options) : options_(options), tracker_(std::make_unique<OpTracker>()) {
  validate(options_);
  backend_ = resolve_backend(options_.backend, options_.queue_depth);
  for (int t = 0; t < options_.thread_count; ++t)
    workers_.push_back(std::make_unique<IoWorker>(make_io_queue(backend_, options_.queue_depth), options_));
}

AsyncIo::~AsyncIo() {
  {
    std::unique_lock lk(tracker_->mu);
    tracker_->cv.wait(lk, [&] { return tracker_->outstanding == 0; });
  }
  workers_.clear();
}

IoHandle AsyncIo::read(const DirectFile& file, void* buf, int64_t bytes, int64_t offset) {
  return submit(file, static_cast<char*>(buf), bytes, offset, false);
}

IoHandle AsyncIo::write(const DirectFile& file, const void* buf, int64_t bytes, int64_t offset) {
  // The kernel only reads from a write's buffer; the cast is to share one request type.
  return submit(file, static_cast<char*>(const_cast<void*>(buf)), bytes, offset, true);
}

IoHandle AsyncIo::submit(const DirectFile& file, char* buf, int64_t bytes, int64_t offset, bool write) {
  const char* op = write ? "write" : "read";
  if (!file) fail("aio {}: the file is not open", op);
  if (write ? !file.writable() : !file.readable())
    fail("aio {} on {}: the file was opened for {} only", op, file.path(), write ? "reading" : "writing");
  if (bytes <= 0 || offset < 0)
    fail("aio {} on {}: needs a positive length and a non-negative offset, got {} bytes at offset {}", op, file.path(),
         bytes, offset);
  if (!is_aligned(buf))
    fail(
        "aio {} on {}: the buffer address {} is not aligned to {} bytes, which O_DIRECT requires; allocate it "
        "with offload::AlignedBuffer (posix_memalign)",
        op, file.path(), static_cast<const void*>(buf), kDirectIoAlignment);
  if (!is_aligned(offset) || !is_aligned(bytes))
    fail(
        "aio {} on {}: offset {} and length {} must be multiples of {} for O_DIRECT; pad the tensor to a "
        "multiple of {} bytes (AlignedBuffer::capacity() is one)",
        op, file.path(), offset, bytes, kDirectIoAlignment, kDirectIoAlignment);
  file.check_present();
  if (!write) {
    int64_t size = file.size();
    if (offset + bytes > size)
      fail("aio read past end of file: {} holds {} ({} bytes), the read asks for bytes [{}, {})", file.path(),
           format_bytes(size), size, offset, offset + bytes);
  }

  auto request = std::make_shared<IoOp>(file.fd(), file.path(), buf, bytes, offset, write, tracker_.get());
  // DeepSpeed's split: thread t moves one contiguous slice, so each worker streams
  // sequentially through its own part of the file.
  const auto threads = static_cast<int64_t>(workers_.size());
  const int64_t slice = round_up((bytes + threads - 1) / threads, kDirectIoAlignment);
  int64_t pieces = 0;
  for (int64_t t = 0; t < threads && t * slice < bytes; ++t)
    pieces += workers_[static_cast<size_t>(t)]->piece_count(std::min(slice, bytes - t * slice));
  request->start(pieces, request);
  for (int64_t t = 0; t < threads && t * slice < bytes; ++t)
    workers_[static_cast<size_t>(t)]->enqueue(request.get(), buf + t * slice, std::min(slice, bytes - t * slice),
                                              offset + t * slice);
  return IoHandle(std::move(request));
}

int64_t AsyncIo::wait_all() {
  std::unique_lock lk(tracker_->mu);
  tracker_->cv.wait(lk, [&] { return tracker_->outstanding == 0; });
  int64_t finished = std::exchange(tracker_->finished, 0);
  std::string error = std::exchange(tracker_->first_error, std::string());
  if (!error.empty()) throw Error(error);
  return finished;
}

}  // namespace dscpp::offload
