// `dscpp zero-to-fp32 CKPT OUT` and `dscpp export-hf CKPT OUT_DIR`: the conversions themselves
// are checkpoint/zero_to_fp32.h and checkpoint/export_hf.h (no engine: the launcher never links
// the runtime); this adds the progress lines and summaries.
#include "checkpoint/export_hf.h"
#include "checkpoint/zero_to_fp32.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "launcher/commands/commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

namespace dscpp::launcher {

namespace {
std::string gigabytes(int64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

// " (N frozen)" when some tensors came from frozen.safetensors.
std::string frozen_count(const ckpt::ConsolidateResult& r) {
  return r.frozen ? fmt::format(" ({} frozen)", r.frozen) : "";
}

const char* verdict(const ckpt::ConsolidateResult& r) {
  return r.verified ? "its files match their SHA-256 digests" : "no digests recorded: its files were not verified";
}

using Clock = std::chrono::steady_clock;

// A progress line on stderr at most every `interval` seconds (none when quiet).
std::function<void(const ckpt::ConsolidateProgress&)> progress_lines(const char* command, double interval, bool quiet) {
  auto last = std::make_shared<Clock::time_point>(Clock::now());
  return [=](const ckpt::ConsolidateProgress& p) {
    Clock::time_point now = Clock::now();
    bool done = p.tensors_done == p.tensors_total;
    if (quiet || done || std::chrono::duration<double>(now - *last).count() < interval) return;
    *last = now;
    std::fprintf(
        stderr, "%s",
        fmt::format(
            "{}: {}/{} tensors, {} of {} ({:.0f}%)\n", command, p.tensors_done, p.tensors_total,
            gigabytes(p.bytes_done), gigabytes(p.bytes_total),
            p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100.0)
            .c_str());
  };
}

}  // namespace

int run_zero_to_fp32(const ZeroToFp32Args& args) {
  const Clock::time_point start = Clock::now();
  ckpt::ConsolidateResult r = ckpt::zero_to_fp32(
      args.checkpoint, args.out, progress_lines("zero-to-fp32", args.progress_interval, args.quiet), args.state);
  const std::string what = args.state == "fp32" ? "master weights" : "optimizer state " + args.state;
  std::printf("%s", fmt::format("wrote {}: {}, {} tensors{}, {} fp32 values ({}), from {} (ZeRO stage {}, {} rank{}, "
                                "step {}; {}) in {:.2f} s\n",
                                args.out, what, r.tensors, frozen_count(r), r.numel, gigabytes(r.numel * 4), r.tag_dir,
                                r.zero_stage, r.world_size, r.world_size == 1 ? "" : "s", r.global_steps, verdict(r),
                                std::chrono::duration<double>(Clock::now() - start).count())
                        .c_str());
  return 0;
}

int run_export_hf(const ExportHfArgs& args) {
  const Clock::time_point start = Clock::now();
  ckpt::ExportOptions o;
  const std::optional<DType> dtype = parse_dtype(args.dtype);
  if (!dtype || (*dtype != DType::f32 && *dtype != DType::bf16 && *dtype != DType::f16))
    fail("export-hf: --dtype is fp32, bf16 or fp16, not '{}'", args.dtype);
  o.dtype = *dtype;
  o.max_shard_bytes = parse_bytes(args.max_shard_size, "export-hf --max_shard_size");
  o.config = args.config;
  o.kind = args.adapter ? ckpt::ExportKind::adapter : args.merge ? ckpt::ExportKind::merged : ckpt::ExportKind::model;
  o.base_model = args.base;
  ckpt::ExportResult r = ckpt::export_hf(args.checkpoint, args.out_dir, o,
                                         progress_lines("export-hf", args.progress_interval, args.quiet));
  std::string adapter;
  if (o.kind == ckpt::ExportKind::merged) adapter = fmt::format("; {} LoRA pairs merged", r.merged);
  // Written as they are, the adapter matrices are tensors transformers does not use.
  if (o.kind == ckpt::ExportKind::model && r.adapters > 0)
    adapter = fmt::format(
        "; {} LoRA adapter matrices under their own names: --merge folds them in, --adapter "
        "writes PEFT's adapter directory",
        r.adapters);
  std::printf("%s",
              fmt::format("wrote {}: {} ({} tensors{}, {} {} values, {}), from {} (ZeRO stage {}, {} rank{}, "
                          "step {}; {}{}) in {:.2f} s\n",
                          args.out_dir, fmt::join(r.files, ", "), r.read.tensors, frozen_count(r.read), r.read.numel,
                          dtype_name(o.dtype), gigabytes(r.bytes), r.read.tag_dir, r.read.zero_stage, r.read.world_size,
                          r.read.world_size == 1 ? "" : "s", r.read.global_steps, verdict(r.read), adapter,
                          std::chrono::duration<double>(Clock::now() - start).count())
                  .c_str());
  return 0;
}

}  // namespace dscpp::launcher
