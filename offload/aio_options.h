// How the async I/O engine moves bytes: DeepSpeed's `aio` section plus the backend choice.
//
// The runtime fills this from configs' AioConfig (block_size, queue_depth, intra_op_parallelism
// -> thread_count, single_submit, overlap_events); offload does not depend on configs/.
#pragma once

#include "offload/aligned_buffer.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::offload {

enum class AioBackend {
  automatic,  // io_uring when the kernel allows it, else libaio (DSCPP_AIO_BACKEND overrides)
  io_uring,
  libaio,
};

struct AioOptions {
  // Requests are cut into pieces of at most this many bytes (a multiple of 4096).
  int64_t block_size = 1048576;
  // Pieces in flight per worker thread (its ring / context size).
  int queue_depth = 8;
  // Worker threads, each with its own ring or context; every request is split into
  // thread_count contiguous slices, one per thread (DeepSpeed's intra_op_parallelism).
  int thread_count = 1;
  // One submit system call per piece instead of one per batch.
  bool single_submit = false;
  // true: keep queue_depth pieces in flight, refilling as each completes.
  // false: submit queue_depth pieces, wait for all of them, repeat.
  bool overlap_events = true;
  AioBackend backend = AioBackend::automatic;
};

// A value of the `aio` section the engine cannot run with.
struct AioProblem {
  const char* key;       // "aio.block_size"
  std::string expected;  // what the engine accepts there
  int64_t found;
};
// Every such value among the section's (the config's 64-bit values, before AioOptions narrows
// them). Inline, so that `dscpp config check` (configs/rules.cpp, built into the launcher, which
// links no offload/ code) refuses what the engine refuses, in the same words.
inline std::vector<AioProblem> aio_problems(int64_t block_size, int64_t queue_depth, int64_t thread_count) {
  // Beyond these the kernel refuses the ring/context (io_uring: 32768 entries; aio-max-nr is
  // system-wide) or the threads only contend for the same device queue.
  constexpr int64_t kMaxQueueDepth = 4096, kMaxThreads = 256;
  // Linux moves at most 2 GiB - 4 KiB per read/write call; keep pieces well inside it.
  constexpr int64_t kMaxBlockSize = int64_t{1} << 30;
  std::vector<AioProblem> out;
  if (block_size <= 0 || !is_aligned(block_size) || block_size > kMaxBlockSize)
    out.push_back(
        {"aio.block_size",
         fmt::format("a positive multiple of {} bytes (the O_DIRECT alignment) up to 1 GiB", kDirectIoAlignment),
         block_size});
  if (queue_depth < 1 || queue_depth > kMaxQueueDepth)
    out.push_back(
        {"aio.queue_depth", fmt::format("1 to {} requests in flight per thread", kMaxQueueDepth), queue_depth});
  if (thread_count < 1 || thread_count > kMaxThreads)
    out.push_back({"aio.intra_op_parallelism", fmt::format("1 to {} I/O threads", kMaxThreads), thread_count});
  return out;
}
inline std::string describe(const AioProblem& p) {
  return fmt::format("{}: expected {}, found {}", p.key, p.expected, p.found);
}

// Throws dscpp::Error with aio_problems' first, naming the key, what it must be and the value.
void validate(const AioOptions& options);

const char* backend_name(AioBackend backend);
// "auto" | "io_uring" | "libaio"; throws dscpp::Error for anything else, naming `what`.
AioBackend parse_backend(std::string_view text, std::string_view what);

// The environment variable that forces a backend when AioOptions::backend is automatic
// (the DeepSpeed config has no such key): DSCPP_AIO_BACKEND=io_uring|libaio|auto.
inline constexpr const char* kBackendEnv = "DSCPP_AIO_BACKEND";

// The `aio` block of a DeepSpeed config with these values, as one JSON object text.
std::string aio_config_json(const AioOptions& options);

}  // namespace dscpp::offload
