// TensorSwapper and SwapBufferPool: slots land at slot·slot_bytes in the swap file (checked
// with plain pread, independent of the engine), round trips are exact on every built backend,
// and each failure names the file and the remedy.
#include "build_config.h"
#include "core/error.h"
#include "offload/tensor_swapper.h"
#include "tests/unit/offload_fixture.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

using namespace dscpp::offload;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using dscpp::test::TempDir;
using dscpp::test::built_backends;

AioOptions options(AioBackend backend, int threads) {
  AioOptions o;
  o.backend = backend;
  o.block_size = 16 << 10;  // several pieces per slot, so piece ordering is exercised
  o.queue_depth = 4;
  o.thread_count = threads;
  return o;
}

void fill(char* dst, int64_t bytes, uint32_t seed) {
  for (int64_t i = 0; i < bytes; i += 4) {
    uint32_t v = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    std::memcpy(dst + i, &v, 4);
  }
}

std::string pread_plain(const std::string& path, int64_t offset, int64_t bytes) {
  std::string out(static_cast<size_t>(bytes), '\0');
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, out.data(), static_cast<size_t>(bytes), offset) == bytes);
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("tensor swapper: slots round-trip exactly and sit at slot * slot_bytes", "[swapper]") {
  for (AioBackend backend : built_backends())
    for (int threads : {1, 3}) {
      CAPTURE(backend_name(backend), threads);
      TempDir root;
      SwapDir dir(root.path, "swapper", 0, {.watch_for_crash = false});
      AsyncIo io(options(backend, threads));
      const int64_t bytes = 100000;  // not a multiple of 4096: the slot is rounded up to 102400
      TensorSwapper sw(io, dir, "optimizer", bytes, 5);
      REQUIRE(sw.slot_bytes() == 102400);
      REQUIRE(fs::file_size(dir.file("optimizer.swp")) == static_cast<uintmax_t>(5 * 102400));
      SwapBufferPool pool(3, sw.slot_bytes(), false, "test.buffer_count");
      // Write slots 4, 1, 2 concurrently, from three pool buffers.
      std::vector<int> slots{4, 1, 2}, bufs;
      std::vector<IoHandle> handles;
      for (int s : slots) {
        bufs.push_back(pool.acquire());
        fill(pool.data(bufs.back()), bytes, static_cast<uint32_t>(s));
        handles.push_back(sw.swap_out(s, pool.data(bufs.back()), bytes));
      }
      for (IoHandle& h : handles) CHECK(h.wait() == 102400);
      for (size_t i = 0; i < slots.size(); ++i)
        CHECK(pread_plain(sw.path(), slots[i] * sw.slot_bytes(), bytes) ==
              std::string(pool.data(bufs[i]), static_cast<size_t>(bytes)));
      // Read back in another order into other buffers.
      std::vector<char> expect(static_cast<size_t>(bytes));
      for (int s : {2, 4, 1}) {
        std::memset(pool.data(bufs[0]), 0, static_cast<size_t>(sw.slot_bytes()));
        sw.swap_in(s, pool.data(bufs[0]), bytes).wait();
        fill(expect.data(), bytes, static_cast<uint32_t>(s));
        CHECK(std::memcmp(pool.data(bufs[0]), expect.data(), static_cast<size_t>(bytes)) == 0);
      }
      // A slot never written reads as zeros (the file is preallocated, not sparse garbage).
      sw.swap_in(0, pool.data(bufs[1]), bytes).wait();
      CHECK(std::all_of(pool.data(bufs[1]), pool.data(bufs[1]) + bytes, [](char c) { return c == 0; }));
      CHECK(sw.bytes_written() == 3 * 102400);
      CHECK(sw.bytes_read() == 4 * 102400);
      for (int b : bufs) pool.release(b);
    }
}

TEST_CASE("tensor swapper: misuse is refused with the file named", "[swapper]") {
  TempDir root;
  SwapDir dir(root.path, "swapper", 0, {.watch_for_crash = false});
  AsyncIo io(AioOptions{});
  TensorSwapper sw(io, dir, "t", 8192, 2);
  SwapBufferPool pool(1, 3 * 4096, false, "test.buffer_count");
  int b = pool.acquire();
  CHECK_THROWS_WITH(sw.swap_out(2, pool.data(b), 4096), Contains("slot 2 does not exist") && Contains(sw.path()));
  CHECK_THROWS_WITH(sw.swap_in(0, pool.data(b), 3 * 4096),
                    Contains("do not fit a slot of 8192") && Contains(sw.path()));
  CHECK_THROWS_WITH(TensorSwapper(io, dir, "u", 0, 1), Contains("positive slot size"));
}

TEST_CASE("swap buffer pool: a dry pool names its config key; buffers can be pinned", "[swapper]") {
  SwapBufferPool pool(2, 5000, false, "offload_optimizer.buffer_count");
  CHECK(pool.buffer_bytes() == 8192);
  int a = pool.acquire(), b = pool.acquire();
  CHECK(a != b);
  CHECK(pool.free_count() == 0);
  CHECK_THROWS_WITH(pool.acquire(), Contains("all 2 swap buffers") && Contains("raise offload_optimizer.buffer_count"));
  pool.release(a);
  CHECK(pool.acquire() == a);
  const int64_t locked_before = host_buffer_stats().locked;
  {
    SwapBufferPool pinned(2, 4096, true, "k");
    CHECK(pinned.pinned());
    CHECK(host_buffer_stats().locked - locked_before == 2 * 4096);
  }
  CHECK(host_buffer_stats().locked == locked_before);
}

TEST_CASE("tensor swapper: a swap file removed underneath is reported, not written into the void", "[swapper]") {
  TempDir root;
  SwapDir dir(root.path, "swapper", 0, {.watch_for_crash = false});
  AsyncIo io(AioOptions{});
  TensorSwapper sw(io, dir, "optimizer", 4096, 2);
  SwapBufferPool pool(1, 4096, false, "k");
  sw.swap_out(0, pool.data(0), 4096).wait();
  REQUIRE(::unlink(sw.path().c_str()) == 0);
  CHECK_THROWS_WITH(sw.swap_out(1, pool.data(0), 4096),
                    Contains(sw.path()) && Contains("was removed while the job was using it") &&
                        Contains("Keep nvme_path private"));
  CHECK_THROWS_WITH(sw.swap_in(0, pool.data(0), 4096), Contains("was removed"));
}

// A 1 MiB tmpfs in a private mount namespace, as in test_aio; exits 77 (skipped) without the
// right to mount.
TEST_CASE("tensor swapper: a disk too small for the swap file fails at construction", "[.disk_full]") {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    WARN("cannot create a mount namespace (needs root): skipped");
    std::exit(77);
  }
  TempDir root;
  REQUIRE(::mount("tmpfs", root.path.c_str(), "tmpfs", 0, "size=1m") == 0);
  {
    SwapDir dir(root.path, "swapper", 0, {.watch_for_crash = false});
    AsyncIo io(AioOptions{});
    CHECK_THROWS_WITH(TensorSwapper(io, dir, "optimizer", 1 << 20, 4),
                      Contains(dir.file("optimizer.swp")) && Contains("No space left on device") &&
                          Contains("point nvme_path at a larger disk"));
  }
  ::umount2(root.path.c_str(), MNT_DETACH);
}
