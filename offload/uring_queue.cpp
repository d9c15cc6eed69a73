// io_uring backend: one ring of `depth` entries per worker thread.
#include "core/error.h"
#include "offload/io_queue.h"

#include <liburing.h>

#include <cerrno>
#include <cstring>

namespace dscpp::offload {
namespace {

std::string init_failure(int err) {
  std::string what = std::strerror(err);
  switch (err) {
    case EPERM:
    case EACCES:
      return what +
             " (io_uring is disabled here: sysctl kernel.io_uring_disabled or a seccomp profile such as "
             "a container runtime's default)";
    case ENOSYS:
      return what + " (the kernel has no io_uring; 5.1 or newer is needed)";
    case ENOMEM:
      return what + " (the ring could not be allocated; raise `ulimit -l` on kernels before 5.12)";
    default:
      return what;
  }
}

class UringQueue final : public IoQueue {
 public:
  explicit UringQueue(int depth) {
    int r = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (r < 0) fail("io_uring: cannot create a ring of {} entries: {}", depth, init_failure(-r));
  }
  ~UringQueue() override { io_uring_queue_exit(&ring_); }

  const char* name() const override { return "io_uring"; }

  void prepare(const IoRequest& q) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The caller keeps staged + in flight <= depth <= ring entries, so a free entry exists.
    if (!sqe) fail("io_uring: submission queue full (internal: more requests than queue_depth)");
    if (q.write)
      io_uring_prep_write(sqe, q.fd, q.buf, static_cast<unsigned>(q.bytes), static_cast<uint64_t>(q.offset));
    else
      io_uring_prep_read(sqe, q.fd, q.buf, static_cast<unsigned>(q.bytes), static_cast<uint64_t>(q.offset));
    io_uring_sqe_set_data(sqe, q.piece);
  }

  void submit() override {
    // Per-request failures arrive as completions; a negative return means the ring itself
    // failed (EINTR is retried: nothing was consumed).
    for (;;) {
      int r = io_uring_submit(&ring_);
      if (r >= 0) return;
      if (r != -EINTR && r != -EAGAIN) fail("io_uring: submit failed: {}", std::strerror(-r));
    }
  }

  int reap(int min, IoCompletion* out, int max) override {
    if (min > 0) {
      io_uring_cqe* cqe = nullptr;
      int r;
      do r = io_uring_wait_cqe_nr(&ring_, &cqe, static_cast<unsigned>(min));
      while (r == -EINTR);
      if (r < 0) fail("io_uring: waiting for completions failed: {}", std::strerror(-r));
    }
    int n = 0;
    unsigned head;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (n == max) break;
      out[n++] = {static_cast<IoPiece*>(io_uring_cqe_get_data(cqe)), cqe->res};
    }
    io_uring_cq_advance(&ring_, static_cast<unsigned>(n));
    return n;
  }

 private:
  io_uring ring_{};
};

}  // namespace

std::unique_ptr<IoQueue> make_uring_queue(int depth) {
  return std::make_unique<UringQueue>(depth);
}

}  // namespace dscpp::offload
