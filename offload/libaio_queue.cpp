// libaio backend (Linux native AIO, what DeepSpeed's aio op uses): one context of `depth`
// events per worker thread.
#include "core/error.h"
#include "offload/io_queue.h"

#include <libaio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace dscpp::offload {
namespace {

constexpr int kMaxBusyRetries = 10000;  // x 100 us

class LibaioQueue final : public IoQueue {
 public:
  explicit LibaioQueue(int depth) : iocbs_(static_cast<size_t>(depth)), events_(static_cast<size_t>(depth)) {
    int r = io_setup(depth, &ctx_);
    if (r < 0)
      fail("libaio: cannot create a context of {} events: {}{}", depth, std::strerror(-r),
           r == -EAGAIN ? " (the system-wide limit /proc/sys/fs/aio-max-nr is reached; raise it or lower "
                          "queue_depth/thread_count)"
                        : "");
    free_.reserve(iocbs_.size());
    for (auto& cb : iocbs_) free_.push_back(&cb);
  }
  ~LibaioQueue() override {
    // io_destroy waits for requests still in flight, so no buffer is written after return.
    io_destroy(ctx_);
  }

  const char* name() const override { return "libaio"; }

  void prepare(const IoRequest& q) override {
    if (free_.empty()) fail("libaio: no free iocb (internal: more requests than queue_depth)");
    iocb* cb = free_.back();
    free_.pop_back();
    if (q.write)
      io_prep_pwrite(cb, q.fd, q.buf, static_cast<size_t>(q.bytes), q.offset);
    else
      io_prep_pread(cb, q.fd, q.buf, static_cast<size_t>(q.bytes), q.offset);
    cb->data = q.piece;
    staged_.push_back(cb);
  }

  void submit() override {
    size_t done = 0;
    int busy_retries = 0;
    while (done < staged_.size()) {
      int r = io_submit(ctx_, static_cast<long>(staged_.size() - done), staged_.data() + done);
      if (r > 0) {
        done += static_cast<size_t>(r);
      } else if (r == -EINTR) {
        continue;
      } else if (r == -EAGAIN || r == 0) {
        // The context is sized for depth requests, so this is transient kernel pressure.
        if (++busy_retries > kMaxBusyRetries)
          fail("libaio: io_submit keeps returning EAGAIN (kernel out of aio resources); lower queue_depth");
        usleep(100);
      } else {
        // io_submit reports the first refused iocb's error (e.g. EINVAL for a misaligned
        // O_DIRECT request); hand it back as that request's completion and go on.
        iocb* cb = staged_[done++];
        refused_.push_back({static_cast<IoPiece*>(cb->data), r});
        free_.push_back(cb);
      }
    }
    staged_.clear();
  }

  int reap(int min, IoCompletion* out, int max) override {
    int n = 0;
    while (!refused_.empty() && n < max) {
      out[n++] = refused_.back();
      refused_.pop_back();
    }
    int want = min > n ? min - n : 0;
    if (n == max) return n;
    int r;
    do r = io_getevents(ctx_, want, max - n, events_.data(), nullptr);
    while (r == -EINTR);
    if (r < 0) fail("libaio: waiting for completions failed: {}", std::strerror(-r));
    for (int i = 0; i < r; ++i) {
      iocb* cb = events_[static_cast<size_t>(i)].obj;
      free_.push_back(cb);
      out[n++] = {static_cast<IoPiece*>(cb->data),
                  static_cast<int64_t>(static_cast<long>(events_[static_cast<size_t>(i)].res))};
    }
    return n;
  }

 private:
  io_context_t ctx_ = nullptr;
  std::vector<iocb> iocbs_;
  std::vector<io_event> events_;
  std::vector<iocb*> free_, staged_;
  std::vector<IoCompletion> refused_;
};

}  // namespace

std::unique_ptr<IoQueue> make_libaio_queue(int depth) {
  return std::make_unique<LibaioQueue>(depth);
}

}  // namespace dscpp::offload
