// dscpp-aio-bench (run as `dscpp aio-bench`): DeepSpeed ds_io-style sweep of the aio settings
// on a path, GB/s for write and read per combination, then the best setting measured again
// beside fio running the same pattern on the same file, and the `aio` block to paste into a
// DeepSpeed config.
#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "offload/aio_sweep.h"
#include "offload/async_io.h"
#include "offload/fio_baseline.h"
#include "offload/io_queue.h"
#include "offload/swap_dir.h"

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace dscpp::offload {
namespace {

struct BenchArgs {
  std::string path;
  std::string size = "1G";
  std::vector<std::string> block_sizes = {"256K", "1M", "4M"};
  std::vector<int> queue_depths = {8, 32};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> single_submit = {"false"};
  std::vector<std::string> overlap_events = {"true"};
  std::string backend = "auto";
  int repeat = 3;
  bool no_fio = false;
  std::string fio;
  double min_ratio = 0;
};

std::vector<bool> parse_bools(const std::vector<std::string>& texts, const char* flag) {
  std::vector<bool> out;
  for (const auto& t : texts) {
    if (t == "true" || t == "1")
      out.push_back(true);
    else if (t == "false" || t == "0")
      out.push_back(false);
    else
      fail("{}: expected true or false, found \"{}\"", flag, t);
  }
  return out;
}

struct Row {
  AioOptions options;
  PassResult result;
  // One figure for "good at both", as a swap-in plus swap-out moves the same bytes each way.
  double combined() const { return 2 / (1 / result.write_gbps + 1 / result.read_gbps); }
};

std::string describe(const AioOptions& o) {
  return fmt::format("block_size {} queue_depth {} threads {}{}{}", short_bytes(o.block_size), o.queue_depth,
                     o.thread_count, o.single_submit ? " single_submit" : "",
                     o.overlap_events ? "" : " no-overlap_events");
}

void print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// Ours and fio, alternating, `repeat` times each; medians and the ratio.
bool compare_with_fio(const BenchArgs& a, const std::string& fio, const std::string& file, int64_t size,
                      AlignedBuffer& buffer, const AioOptions& best) {
  print(fmt::format("\nvs {} on the same file, {} (median of {} alternating runs):\n", fio_version(fio), describe(best),
                    a.repeat));
  print(fmt::format("  fio {}   (reads: --rw=read)\n", fmt::join(fio_args(file, size, best, true), " ")));
  bool ok = true;
  for (bool write : {true, false}) {
    std::vector<double> ours, theirs;
    for (int i = 0; i < a.repeat; ++i) {
      PassResult r = measure_passes(DirectFile(file, OpenMode::read_write), buffer, size, best, write, !write);
      ours.push_back(write ? r.write_gbps : r.read_gbps);
      theirs.push_back(run_fio(fio, fio_args(file, size, best, write), write));
    }
    double o = median(ours), f = median(theirs), ratio = f > 0 ? o / f : 0;
    print(fmt::format("  {:<5}  ours {:6.2f} GB/s   fio {:6.2f} GB/s   ours/fio {:.2f}{}\n", write ? "write" : "read",
                      o, f, ratio,
                      a.min_ratio > 0 && ratio < a.min_ratio ? fmt::format("  (below {:.2f})", a.min_ratio) : ""));
    ok = ok && !(a.min_ratio > 0 && ratio < a.min_ratio);
  }
  return ok;
}

int run(const BenchArgs& a) {
  struct stat st {};
  if (stat(a.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("--path {}: not an existing directory (give the directory you would use as nvme_path)", a.path);
  int64_t size = parse_bytes(a.size, "--size");
  std::vector<int64_t> block_sizes;
  for (const auto& b : a.block_sizes) block_sizes.push_back(parse_bytes(b, "--block_sizes"));
  AioOptions base;
  base.backend = resolve_backend(parse_backend(a.backend, "--backend"), 8);
  auto grid = sweep_grid(base, block_sizes, a.queue_depths, a.threads, parse_bools(a.single_submit, "--single_submit"),
                         parse_bools(a.overlap_events, "--overlap_events"));
  int max_threads = *std::max_element(a.threads.begin(), a.threads.end());
  if (size % (kDirectIoAlignment * max_threads) != 0)
    fail(
        "--size {} must be a multiple of 4 KiB x the largest thread count ({}) so every thread moves an equal, "
        "aligned slice; try {}",
        a.size, max_threads, short_bytes(round_up(size, kDirectIoAlignment * max_threads)));
  if (a.repeat < 1) fail("--repeat must be at least 1, got {}", a.repeat);

  SwapDir dir(a.path, "aio-bench-p" + std::to_string(getpid()), 0);
  std::string file = dir.file("bench.dat");
  {
    DirectFile f(file, OpenMode::read_write);
    f.preallocate(size);
  }
  AlignedBuffer buffer(size);
  struct statvfs v {};
  statvfs(a.path.c_str(), &v);
  print(fmt::format("dscpp aio-bench: {} ({} free), file {}, backend {}, O_DIRECT, preallocated\n", a.path,
                    format_bytes(static_cast<int64_t>(v.f_bavail * v.f_frsize)), format_bytes(size),
                    backend_name(base.backend)));
  // The first write turns preallocated (unwritten) extents into written ones; time the
  // steady state, which is what fio and later swaps see.
  measure_passes(DirectFile(file, OpenMode::read_write), buffer, size, base, true, false);

  print(fmt::format("\n{:>10} {:>11} {:>7} {:>13} {:>14}   {:>10} {:>10}\n", "block_size", "queue_depth", "threads",
                    "single_submit", "overlap_events", "write GB/s", "read GB/s"));
  std::vector<Row> rows;
  for (const auto& o : grid) {
    Row row{o, measure_passes(DirectFile(file, OpenMode::read_write), buffer, size, o)};
    rows.push_back(row);
    print(fmt::format("{:>10} {:>11} {:>7} {:>13} {:>14}   {:>10.2f} {:>10.2f}\n", short_bytes(o.block_size),
                      o.queue_depth, o.thread_count, o.single_submit, o.overlap_events, row.result.write_gbps,
                      row.result.read_gbps));
  }
  auto best_by = [&](auto key) {
    return *std::max_element(rows.begin(), rows.end(), [&](auto& x, auto& y) { return key(x) < key(y); });
  };
  Row best_write = best_by([](const Row& r) { return r.result.write_gbps; });
  Row best_read = best_by([](const Row& r) { return r.result.read_gbps; });
  Row best = best_by([](const Row& r) { return r.combined(); });
  print(fmt::format("\nbest write: {:.2f} GB/s with {}\n", best_write.result.write_gbps, describe(best_write.options)));
  print(fmt::format("best read:  {:.2f} GB/s with {}\n", best_read.result.read_gbps, describe(best_read.options)));
  print(fmt::format("best both:  {:.2f} GB/s write, {:.2f} GB/s read with {}\n", best.result.write_gbps,
                    best.result.read_gbps, describe(best.options)));

  bool ok = true;
  if (!a.no_fio) {
    if (auto fio = find_fio(a.fio))
      ok = compare_with_fio(a, *fio, file, size, buffer, best.options);
    else
      print(fmt::format("\nfio: not found{} — install it (apt-get install -y fio) to compare against it\n",
                        a.fio.empty() ? " on PATH" : " at " + a.fio));
  }
  print(fmt::format("\naio config for {} (backend {}; add to the DeepSpeed config):\n\"aio\": {}\n", a.path,
                    backend_name(base.backend), aio_config_json(best.options)));
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace dscpp::offload

int main(int argc, char** argv) {
  dscpp::offload::BenchArgs a;
  CLI::App app{
      "dscpp aio-bench: sweep block size x queue depth x threads of the async I/O engine on PATH, print GB/s for\n"
      "write and read per combination, compare the best against fio running the same pattern on the same file,\n"
      "and print the `aio` config block to use. Needs SIZE free bytes under PATH and SIZE of memory.",
      "dscpp aio-bench"};
  app.add_option("--path", a.path, "directory to benchmark (e.g. your nvme_path); a temporary file is made there")
      ->required();
  app.add_option("--size", a.size, "file size per pass (default 1G)");
  app.add_option("--block_sizes", a.block_sizes, "block sizes to sweep (default 256K,1M,4M)")->delimiter(',');
  app.add_option("--queue_depths", a.queue_depths, "queue depths to sweep (default 8,32)")->delimiter(',');
  app.add_option("--threads", a.threads, "thread counts (intra_op_parallelism) to sweep (default 1,2)")->delimiter(',');
  app.add_option("--single_submit", a.single_submit, "single_submit values to sweep (default false)")->delimiter(',');
  app.add_option("--overlap_events", a.overlap_events, "overlap_events values to sweep (default true)")->delimiter(',');
  app.add_option("--backend", a.backend, "auto | io_uring | libaio (default auto: io_uring when it works here)");
  app.add_option("--repeat", a.repeat, "alternating ours/fio runs for the comparison (default 3)");
  app.add_flag("--no_fio", a.no_fio, "skip the fio comparison");
  app.add_option("--fio", a.fio, "the fio executable (default: fio on PATH)");
  app.add_option("--min_ratio", a.min_ratio, "exit 1 when ours/fio falls below this (e.g. 0.8)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return dscpp::offload::run(a);
  } catch (const dscpp::Error& e) {
    std::fprintf(stderr, "dscpp aio-bench: error: %s\n", e.what());
    return 1;
  }
}
