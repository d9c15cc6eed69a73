#include "core/thread_pool.h"

#include "core/knobs.h"
#include "core/protected_memory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace dscpp {
namespace {

int default_threads() {
  for (const char* v : {knob("DSCPP_NUM_THREADS"), static_cast<const char*>(std::getenv("OMP_NUM_THREADS"))}) {
    if (v != nullptr) {
      int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Spins until `ready` or about 50 µs have passed; false if it gave up. Waking a thread blocked
// on a futex costs tens of microseconds under a hypervisor — more than many of the jobs
// (decoding a small model runs hundreds a token: 0.3 ms a token on one thread, 1.9 ms on two
// before the spin) — so the pool's threads look again for a moment before they sleep.
template <class Ready>
bool spin_until(Ready ready) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (int i = 1;; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > give_up) return false;
  }
}

// Workers wait for a generation number to change, run their chunk, and report back. A job
// is published under the mutex; there is at most one job at a time (parallel_for holds
// `run_mutex_` for its whole duration). Both sides spin briefly (spin_until) before they block.
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  int threads() {
    std::lock_guard lock(mutex_);
    return threads_;
  }

  void set_threads(int n) {
    std::lock_guard run(run_mutex_);
    stop_workers();
    std::lock_guard lock(mutex_);
    threads_ = std::max(1, n);
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body, int64_t align) {
    if (n <= 0) return;
    if (in_body_) {  // nested: run serially rather than deadlock
      body(0, n);
      return;
    }
    std::unique_lock run_lock(run_mutex_, std::try_to_lock);
    if (!run_lock.owns_lock()) {  // another thread is using the pool: do the work here
      body(0, n);
      return;
    }
    int threads = this->threads();
    int64_t chunks = std::min<int64_t>(threads, std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
    if (chunks <= 1) {
      body(0, n);
      return;
    }
    int64_t per = (n + chunks - 1) / chunks;
    align = std::max<int64_t>(1, align);
    per = (per + align - 1) / align * align;
    chunks = (n + per - 1) / per;
    ensure_workers(static_cast<int>(chunks) - 1);
    {
      std::lock_guard lock(mutex_);
      body_ = &body;
      n_ = n;
      per_ = per;
      chunks_ = chunks;
      pending_.store(chunks - 1, std::memory_order_relaxed);
      error_ = nullptr;
      protected_open_ = ProtectedAccess::open_here();
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    run_chunk(0);
    auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    const bool quick = spin_until(finished);
    std::unique_lock lock(mutex_);  // error_ is written under it
    if (!quick) done_.wait(lock, finished);
    body_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  ~Pool() {
    std::lock_guard run(run_mutex_);
    stop_workers();
  }

 private:
  Pool() : threads_(default_threads()) {}

  void run_chunk(int64_t index) {
    int64_t begin = index * per_;
    int64_t end = std::min(n_, begin + per_);
    if (begin >= end) return;
    // A worker acts with the caller's access to protected memory (a cuda-sim kernel's GEMM
    // splits over the pool): the share it runs is part of the caller's loop.
    std::optional<ProtectedAccess> access;
    if (index > 0 && protected_open_) access.emplace();
    in_body_ = true;
    try {
      (*body_)(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    in_body_ = false;
  }

  void ensure_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      int index = static_cast<int>(workers_.size()) + 1;
      const uint64_t current = generation_.load(std::memory_order_acquire);
      // The worker starts from the generation current now, before the next job is published.
      workers_.emplace_back([this, index, current] { worker(index, current); });
    }
  }

  void worker(int index, uint64_t seen) {
    ProtectedAccess::close_this_thread();  // it may have been started from inside a scope
    auto job = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
      if (!spin_until(job)) {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, job);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      // The job's fields were written before the generation moved (release/acquire).
      seen = generation_.load(std::memory_order_acquire);
      if (index >= chunks_) continue;
      run_chunk(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);  // the caller may be between its check and its wait
        done_.notify_one();
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard lock(mutex_);
      stop_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    std::lock_guard lock(mutex_);
    stop_.store(false, std::memory_order_release);
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  int threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0, per_ = 0, chunks_ = 0;
  std::atomic<int64_t> pending_{0};
  bool protected_open_ = false;  // the caller of the current job is inside a ProtectedAccess scope
  std::exception_ptr error_;
  static thread_local bool in_body_;
};

thread_local bool Pool::in_body_ = false;

}  // namespace

int num_threads() { return Pool::instance().threads(); }
void set_num_threads(int n) { Pool::instance().set_threads(n); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body, int64_t align) {
  Pool::instance().run(n, grain, body, align);
}

}  // namespace dscpp
