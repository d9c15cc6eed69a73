// AsyncIo: reads and writes of aligned host buffers at file offsets, asynchronously, over
// io_uring (libaio when io_uring is unavailable or forced). The engine behind ZeRO-Infinity's
// swapping, configured by DeepSpeed's `aio` section (see aio_options.h).
//
// Contract:
//  - Files are DirectFiles (O_DIRECT). Buffer address, file offset and length must be
//    multiples of kDirectIoAlignment (4096); AlignedBuffer gives such buffers. A violation is
//    refused at submission with an Error saying which one and how to fix it.
//  - A read must lie within the file as it is at submission (read past EOF is an Error).
//  - The buffer and the file must stay alive until the request has finished (its handle's
//    wait() returned or wait_all() covered it). Requests may complete in any order; a read
//    must not overlap a write still in flight.
//  - Failures (disk full, I/O error, file removed underneath, ...) are reported by wait()
//    and wait_all() as dscpp::Error naming the request, the file, the cause and the remedy.
//  - Thread-safe: several threads may submit and wait on one AsyncIo.
#pragma once

#include "offload/aio_options.h"
#include "offload/direct_file.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dscpp::offload {

class IoOp;
class IoWorker;
struct OpTracker;

// Completion of one submitted read or write (cheap to copy; all copies see the same request).
class IoHandle {
 public:
  IoHandle() = default;
  // Blocks until the request has finished; returns its byte count or throws its failure.
  int64_t wait();
  bool done() const;
  explicit operator bool() const { return op_ != nullptr; }

 private:
  friend class AsyncIo;
  explicit IoHandle(std::shared_ptr<IoOp> op) : op_(std::move(op)) {}
  std::shared_ptr<IoOp> op_;
};

class AsyncIo {
 public:
  // Validates the options, picks the backend (throws when none works, saying why) and starts
  // thread_count workers.
  explicit AsyncIo(const AioOptions& options);
  // Waits for every request still in flight; failures not yet collected are dropped.
  ~AsyncIo();
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  const AioOptions& options() const { return options_; }
  AioBackend backend() const { return backend_; }  // io_uring or libaio, never automatic

  IoHandle read(const DirectFile& file, void* buf, int64_t bytes, int64_t offset);
  IoHandle write(const DirectFile& file, const void* buf, int64_t bytes, int64_t offset);
  int64_t read_sync(const DirectFile& file, void* buf, int64_t bytes, int64_t offset) {
    return read(file, buf, bytes, offset).wait();
  }
  int64_t write_sync(const DirectFile& file, const void* buf, int64_t bytes, int64_t offset) {
    return write(file, buf, bytes, offset).wait();
  }

  // DeepSpeed's wait(): blocks until every request submitted so far has finished; returns how
  // many finished since the previous wait_all(). Throws the first failure among those.
  int64_t wait_all();

 private:
  IoHandle submit(const DirectFile& file, char* buf, int64_t bytes, int64_t offset, bool write);

  AioOptions options_;
  AioBackend backend_;
  std::unique_ptr<OpTracker> tracker_;
  std::vector<std::unique_ptr<IoWorker>> workers_;
};

}  // namespace dscpp::offload
