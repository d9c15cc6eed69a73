#include "offload/aio_options.h"

#include "core/error.h"
#include "offload/aligned_buffer.h"

#include <fmt/core.h>

namespace dscpp::offload {

namespace {
// Beyond these the kernel refuses the ring/context (io_uring: 32768 entries; aio-max-nr is
// system-wide) or the threads only contend for the same device queue.
constexpr int kMaxQueueDepth = 4096;
constexpr int kMaxThreads = 256;
// Linux moves at most 2 GiB - 4 KiB per read/write call; keep pieces well inside it.
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;
}  // namespace

void validate(const AioOptions& o) {
  if (o.block_size <= 0 || !is_aligned(o.block_size) || o.block_size > kMaxBlockSize)
    fail("aio.block_size must be a positive multiple of {} (O_DIRECT alignment) up to 1 GiB, got {}",
         kDirectIoAlignment, o.block_size);
  if (o.queue_depth < 1 || o.queue_depth > kMaxQueueDepth)
    fail("aio.queue_depth must be between 1 and {}, got {}", kMaxQueueDepth, o.queue_depth);
  if (o.thread_count < 1 || o.thread_count > kMaxThreads)
    fail("aio.intra_op_parallelism (thread_count) must be between 1 and {}, got {}", kMaxThreads, o.thread_count);
}

const char* backend_name(AioBackend backend) {
  switch (backend) {
    case AioBackend::automatic:
      return "auto";
    case AioBackend::io_uring:
      return "io_uring";
    case AioBackend::libaio:
      return "libaio";
  }
  return "?";
}

AioBackend parse_backend(std::string_view text, std::string_view what) {
  if (text == "auto" || text.empty()) return AioBackend::automatic;
  if (text == "io_uring") return AioBackend::io_uring;
  if (text == "libaio") return AioBackend::libaio;
  fail("{}: unknown aio backend \"{}\" (expected auto, io_uring or libaio)", what, text);
}

std::string aio_config_json(const AioOptions& o) {
  return fmt::format(
      "{{\"block_size\": {}, \"queue_depth\": {}, \"intra_op_parallelism\": {}, \"single_submit\": {}, "
      "\"overlap_events\": {}}}",
      o.block_size, o.queue_depth, o.thread_count, o.single_submit, o.overlap_events);
}

}  // namespace dscpp::offload
