#include "offload/aio_options.h"

#include "core/error.h"

#include <fmt/core.h>

namespace dscpp::offload {

void validate(const AioOptions& o) {
  const std::vector<AioProblem> problems = aio_problems(o.block_size, o.queue_depth, o.thread_count);
  if (!problems.empty()) fail("{}", describe(problems.front()));
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
