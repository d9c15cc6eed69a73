#include "offload/aio_sweep.h"

#include "core/error.h"
#include "offload/async_io.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace dscpp::offload {
namespace {

// A cheap pattern that differs per pass, so a read that returned stale or misplaced data is
// caught: the first 8 bytes of every 4 KiB block hold (offset ^ stamp).
void stamp_blocks(char* buf, int64_t size, uint64_t stamp) {
  for (int64_t at = 0; at < size; at += kDirectIoAlignment) {
    uint64_t v = static_cast<uint64_t>(at) ^ stamp;
    std::memcpy(buf + at, &v, sizeof v);
  }
}

int64_t first_bad_block(const char* buf, int64_t size, uint64_t stamp) {
  for (int64_t at = 0; at < size; at += kDirectIoAlignment) {
    uint64_t v;
    std::memcpy(&v, buf + at, sizeof v);
    if (v != (static_cast<uint64_t>(at) ^ stamp)) return at;
  }
  return -1;
}

double gbps(int64_t bytes, std::chrono::steady_clock::duration d) {
  return static_cast<double>(bytes) / std::chrono::duration<double>(d).count() / 1e9;
}

}  // namespace

PassResult measure_passes(const DirectFile& file, AlignedBuffer& buffer, int64_t size, const AioOptions& options,
                          bool do_write, bool do_read) {
  if (buffer.capacity() < size)
    fail("aio-bench: buffer of {} bytes is smaller than the file ({})", buffer.capacity(), size);
  AsyncIo aio(options);
  PassResult r;
  auto stamp = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (do_write) {
    stamp_blocks(buffer.data(), size, stamp);
    auto t0 = std::chrono::steady_clock::now();
    aio.write_sync(file, buffer.data(), size, 0);
    r.write_gbps = gbps(size, std::chrono::steady_clock::now() - t0);
  }
  if (do_read) {
    // Scribble over the stamps so that only a real read restores them.
    stamp_blocks(buffer.data(), size, ~stamp);
    auto t0 = std::chrono::steady_clock::now();
    aio.read_sync(file, buffer.data(), size, 0);
    r.read_gbps = gbps(size, std::chrono::steady_clock::now() - t0);
    int64_t bad = do_write ? first_bad_block(buffer.data(), size, stamp) : -1;
    if (bad >= 0)
      fail("aio-bench: {} read back wrong data at offset {} with {} (the engine or the device is faulty)", file.path(),
           bad, aio_config_json(options));
  }
  return r;
}

std::vector<AioOptions> sweep_grid(const AioOptions& base, const std::vector<int64_t>& block_sizes,
                                   const std::vector<int>& queue_depths, const std::vector<int>& threads,
                                   const std::vector<bool>& single_submit, const std::vector<bool>& overlap_events) {
  std::vector<AioOptions> grid;
  for (int64_t bs : block_sizes)
    for (int qd : queue_depths)
      for (int t : threads)
        for (bool ss : single_submit)
          for (bool ov : overlap_events) {
            AioOptions o = base;
            o.block_size = bs;
            o.queue_depth = qd;
            o.thread_count = t;
            o.single_submit = ss;
            o.overlap_events = ov;
            validate(o);
            grid.push_back(o);
          }
  return grid;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace dscpp::offload
