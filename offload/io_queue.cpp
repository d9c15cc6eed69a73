#include "offload/io_queue.h"

#include "build_config.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"

#include <atomic>
#include <cstdlib>

namespace dscpp::offload {

#if !DSCPP_HAVE_IO_URING
std::unique_ptr<IoQueue> make_uring_queue(int) {
  fail("io_uring: this dscpp was built without liburing (install liburing-dev and rebuild)");
}
#endif
#if !DSCPP_HAVE_LIBAIO
std::unique_ptr<IoQueue> make_libaio_queue(int) {
  fail("libaio: this dscpp was built without libaio (install libaio-dev and rebuild)");
}
#endif

std::unique_ptr<IoQueue> make_io_queue(AioBackend resolved, int depth) {
  switch (resolved) {
    case AioBackend::io_uring:
      return make_uring_queue(depth);
    case AioBackend::libaio:
      return make_libaio_queue(depth);
    case AioBackend::automatic:
      break;
  }
  return make_io_queue(resolve_backend(resolved, depth), depth);
}

AioBackend resolve_backend(AioBackend requested, int depth) {
  if (requested == AioBackend::automatic) {
    if (const char* env = knob(kBackendEnv)) requested = parse_backend(env, kBackendEnv);
  }
  if (requested != AioBackend::automatic) {
    make_io_queue(requested, depth);  // throws with the reason when it cannot work here
    return requested;
  }
  std::string uring_error;
  try {
    make_uring_queue(depth);
    return AioBackend::io_uring;
  } catch (const Error& e) {
    uring_error = e.what();
  }
  try {
    make_libaio_queue(depth);
  } catch (const Error& e) {
    fail("no async I/O backend works here: {}; {}", uring_error, e.what());
  }
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) log::info("aio: {}; using libaio", uring_error);
  return AioBackend::libaio;
}

}  // namespace dscpp::offload
