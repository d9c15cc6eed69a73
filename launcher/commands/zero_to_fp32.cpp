// `dscpp zero-to-fp32 CKPT OUT`: the consolidation itself is checkpoint/zero_to_fp32.h (no
// engine: the launcher never links the runtime); this adds the progress lines and summary.
#include "checkpoint/zero_to_fp32.h"
#include "launcher/commands/commands.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

namespace dscpp::launcher {

namespace {
std::string gigabytes(int64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}
}  // namespace

int run_zero_to_fp32(const ZeroToFp32Args& args) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  auto progress = [&](const ckpt::ConsolidateProgress& p) {
    Clock::time_point now = Clock::now();
    bool done = p.tensors_done == p.tensors_total;
    if (args.quiet || done || std::chrono::duration<double>(now - last).count() < args.progress_interval) return;
    last = now;
    std::fprintf(
        stderr, "%s",
        fmt::format(
            "zero-to-fp32: {}/{} tensors, {} of {} ({:.0f}%)\n", p.tensors_done, p.tensors_total,
            gigabytes(p.bytes_done), gigabytes(p.bytes_total),
            p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100.0)
            .c_str());
  };
  ckpt::ConsolidateResult r = ckpt::zero_to_fp32(args.checkpoint, args.out, progress, args.state);
  const std::string what = args.state == "fp32" ? "master weights" : "optimizer state " + args.state;
  std::printf("%s", fmt::format("wrote {}: {}, {} tensors, {} fp32 values ({}), from {} (ZeRO stage {}, {} rank{}, "
                                "step {}; {}) in {:.2f} s\n",
                                args.out, what, r.tensors, r.numel, gigabytes(r.numel * 4), r.tag_dir, r.zero_stage,
                                r.world_size, r.world_size == 1 ? "" : "s", r.global_steps,
                                r.verified ? "its files match their SHA-256 digests"
                                           : "no digests recorded: its files were not verified",
                                std::chrono::duration<double>(Clock::now() - start).count())
                        .c_str());
  return 0;
}

}  // namespace dscpp::launcher
