// One access to protected memory (core/protected_memory.h) per run, for test_protected_memory,
// which runs it in a child process and looks at how the process ended:
//   protected_probe ACTION
// prints "mechanism: ..." then "touching" right before the access under test, and "survived" if
// the process is still alive after it. ACTION:
//   inside        write and read inside a ProtectedAccess scope (survives)
//   read, write   a host read or write outside any scope (dies)
//   after-close   a scope opened and closed, then a write (dies)
//   other-thread  this thread holds a scope while another thread writes (dies with protection
//                 keys; the process-wide mprotect fallback cannot see it and survives)
//   pool          a parallel_for inside a scope whose workers write (survives: the pool carries it)
//   syscall       a socket-style write(2) from device memory outside a scope (EFAULT, exit 3)
//   sim-host-read cuda-sim device memory, filled by copy_from_host, read by host code (dies)
#include "core/protected_memory.h"
#include "core/thread_pool.h"
#include "kernels/cuda/sim/sim_kernels.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

using namespace dscpp;

namespace {

void say(const char* what) {
  std::printf("%s\n", what);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: protected_probe ACTION\n");
    return 2;
  }
  const std::string action = argv[1];
  auto* p = static_cast<volatile int*>(protected_allocate(1 << 20));
  std::printf("mechanism: %s\n", protected_mechanism());
  if (action == "inside") {
    ProtectedAccess open;
    say("touching");
    p[10] = 7;
    if (p[10] != 7) return 4;
  } else if (action == "read") {
    say("touching");
    std::printf("read %d\n", p[0]);
  } else if (action == "write") {
    say("touching");
    p[0] = 1;
  } else if (action == "after-close") {
    { ProtectedAccess open; p[0] = 1; }
    say("touching");
    p[1] = 1;
  } else if (action == "other-thread") {
    // The thread exists before the scope opens (one made inside would inherit its rights).
    std::atomic<bool> go{false};
    std::thread other([&] {
      while (!go) std::this_thread::yield();
      p[2] = 3;
    });
    ProtectedAccess open;
    say("touching");
    go = true;
    other.join();
  } else if (action == "pool") {
    set_num_threads(4);
    ProtectedAccess open;
    say("touching");
    parallel_for(1 << 18, 1024, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<int>(i);
    });
    if (p[(1 << 18) - 1] != (1 << 18) - 1) return 4;
  } else if (action == "syscall") {
    int fds[2];
    if (pipe(fds) != 0) return 4;
    say("touching");
    if (write(fds[1], const_cast<int*>(p), 64) < 0 && errno == EFAULT) {
      say("EFAULT");
      return 3;
    }
  } else if (action == "sim-host-read") {
    auto device = make_sim_cuda_device();
    auto* d = static_cast<int*>(device->allocate(64, MemCategory::buffers));
    const int values[4] = {1, 2, 3, 4};
    device->copy_from_host(d, values, sizeof values);
    int back[4] = {};
    device->copy_to_host(back, d, sizeof back);
    if (back[3] != 4) return 4;
    say("touching");
    std::printf("read %d\n", *static_cast<volatile int*>(d));
  } else {
    std::fprintf(stderr, "protected_probe: unknown action %s\n", action.c_str());
    return 2;
  }
  say("survived");
  return 0;
}
