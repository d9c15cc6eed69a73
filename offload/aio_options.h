// How the async I/O engine moves bytes: DeepSpeed's `aio` section plus the backend choice.
//
// The runtime fills this from configs' AioConfig (block_size, queue_depth, intra_op_parallelism
// -> thread_count, single_submit, overlap_events); offload does not depend on configs/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// Throws dscpp::Error naming the field, the value and the accepted range.
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
