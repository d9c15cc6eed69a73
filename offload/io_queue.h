// The one thing an async I/O backend provides: a kernel submission/completion queue for one
// worker thread. Everything else (cutting requests into pieces, keeping the queue full,
// single_submit, overlap_events, short transfers, errors) is shared and lives in io_worker.cpp,
// so io_uring and libaio differ only in the few calls below.
#pragma once

#include "offload/aio_options.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dscpp::offload {

struct IoPiece;  // defined by io_worker.h; a queue only carries the pointer as user data

struct IoRequest {
  IoPiece* piece = nullptr;  // returned unchanged with the completion
  int fd = -1;
  char* buf = nullptr;
  int64_t bytes = 0;
  int64_t offset = 0;
  bool write = false;
};

struct IoCompletion {
  IoPiece* piece = nullptr;
  int64_t result = 0;  // bytes moved, or -errno
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;  // waits for requests still in the kernel
  virtual const char* name() const = 0;
  // Stages one request. The caller never has more than `depth` staged plus in flight.
  virtual void prepare(const IoRequest& request) = 0;
  // Hands every staged request to the kernel. A request the kernel refuses at submission
  // comes back from reap() with its error, so callers see all failures in one place. Throws
  // dscpp::Error only when the queue itself is broken.
  virtual void submit() = 0;
  // Blocks until at least `min` requests have completed (0: only collects what is ready);
  // stores up to `max` completions in `out` and returns how many.
  virtual int reap(int min, IoCompletion* out, int max) = 0;
};

// Throws dscpp::Error when the backend is not built in or the kernel refuses it, saying why.
std::unique_ptr<IoQueue> make_uring_queue(int depth);
std::unique_ptr<IoQueue> make_libaio_queue(int depth);

// Resolves `automatic` (and DSCPP_AIO_BACKEND) to the backend that works here by creating a
// queue of `depth`; logs once when io_uring is unavailable and libaio is used instead. Throws
// dscpp::Error naming both reasons when neither works.
AioBackend resolve_backend(AioBackend requested, int depth);
std::unique_ptr<IoQueue> make_io_queue(AioBackend resolved, int depth);

}  // namespace dscpp::offload
