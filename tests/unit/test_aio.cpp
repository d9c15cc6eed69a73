// The async I/O engine and swap directories. Data read back through the engine is also checked
// with plain pread (the page-cache path), so a backend that wrote to the wrong place cannot
// agree with itself. Error cases assert the message names the file and says what to do.
#include "build_config.h"
#include "core/error.h"
#include "offload/aligned_buffer.h"
#include "offload/async_io.h"
#include "offload/direct_file.h"
#include "offload/io_op.h"
#include "offload/io_queue.h"
#include "offload/io_worker.h"
#include "offload/swap_dir.h"
#include "tests/unit/offload_fixture.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace dscpp::offload;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using dscpp::test::TempDir;
using dscpp::test::built_backends;

// A pattern no two offsets share within a file: byte i of file position p is f(p + i).
void fill_pattern(char* dst, int64_t bytes, int64_t file_offset, uint32_t seed) {
  for (int64_t i = 0; i < bytes; i += 8) {
    uint64_t v = (static_cast<uint64_t>(file_offset + i) * 0x9E3779B97F4A7C15ull) ^ seed;
    std::memcpy(dst + i, &v, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
}

// The file's bytes through the page cache (not O_DIRECT): an oracle independent of the engine.
std::string pread_plain(const std::string& path, int64_t offset, int64_t bytes) {
  std::string out(static_cast<size_t>(bytes), '\0');
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, out.data(), static_cast<size_t>(bytes), offset) == bytes);
  ::close(fd);
  return out;
}

AioOptions options_for(AioBackend backend, int64_t block, int depth, int threads) {
  AioOptions o;
  o.backend = backend;
  o.block_size = block;
  o.queue_depth = depth;
  o.thread_count = threads;
  return o;
}

// Runs `body` in a child process (optionally as an unprivileged user) and returns the message of
// the dscpp::Error it threw, or "no error".
std::string error_in_child(const std::function<void()>& body, bool drop_root) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg = "no error";
    if (drop_root && ::geteuid() == 0 &&
        (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0))
      msg = "setresuid failed";
    else
      try {
        body();
      } catch (const dscpp::Error& e) {
        msg = e.what();
      }
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return msg;
}

}  // namespace

TEST_CASE("aio: options are validated with the accepted range") {
  AioOptions o;
  o.block_size = 1000;
  CHECK_THROWS_WITH(validate(o), Contains("block_size") && Contains("4096") && Contains("1000"));
  o = {};
  o.queue_depth = 0;
  CHECK_THROWS_WITH(validate(o), Contains("queue_depth"));
  o = {};
  o.thread_count = 0;
  CHECK_THROWS_WITH(validate(o), Contains("intra_op_parallelism"));
  CHECK(aio_config_json(AioOptions{}) ==
        R"({"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": false, )"
        R"("overlap_events": true})");
}

TEST_CASE("aio: aligned buffers are aligned, rounded up and counted") {
  int64_t before = host_buffer_stats().current;
  {
    AlignedBuffer b(5000, {.zero = true});
    CHECK(is_aligned(b.data()));
    CHECK(b.size() == 5000);
    CHECK(b.capacity() == 8192);
    CHECK(b.data()[8191] == 0);
    CHECK(host_buffer_stats().current == before + 8192);
    CHECK(host_buffer_stats().peak >= before + 8192);
  }
  CHECK(host_buffer_stats().current == before);
}

namespace {

// A kernel queue that records the calls the shared worker makes and completes requests in
// order, exactly `min` per reap: the submission rules are then visible as a call sequence.
struct RecordingQueue final : IoQueue {
  std::string* calls;
  std::function<int64_t(const IoRequest&, int attempt)> result;
  std::deque<IoRequest> staged, in_kernel;
  std::vector<int64_t> seen_offsets;
  int max_in_kernel = 0;
  RecordingQueue(std::string* c, std::function<int64_t(const IoRequest&, int)> r) : calls(c), result(std::move(r)) {}
  const char* name() const override { return "recording"; }
  void prepare(const IoRequest& q) override {
    *calls += "p";
    staged.push_back(q);
  }
  void submit() override {
    *calls += "s" + std::to_string(staged.size()) + " ";
    while (!staged.empty()) in_kernel.push_back(staged.front()), staged.pop_front();
    max_in_kernel = std::max(max_in_kernel, static_cast<int>(in_kernel.size()));
  }
  int reap(int min, IoCompletion* out, int max) override {
    *calls += "r" + std::to_string(min) + " ";
    int n = 0;
    while (n < std::max(min, 1) && n < max && !in_kernel.empty()) {
      IoRequest q = in_kernel.front();
      in_kernel.pop_front();
      int attempt = static_cast<int>(std::count(seen_offsets.begin(), seen_offsets.end(), q.offset));
      seen_offsets.push_back(q.offset);
      out[n++] = {q.piece, result(q, attempt)};
    }
    return n;
  }
};

// Reads `blocks` 4 KiB blocks (block_size 4 KiB unless given) through one worker over a
// RecordingQueue. Returns the call sequence; `error` receives the request's failure, if any.
std::string record_worker(int blocks, int depth, bool overlap, bool single, std::string* error = nullptr,
                          std::function<int64_t(const IoRequest&, int)> result = nullptr, int* max_in_kernel = nullptr,
                          int64_t block_size = 4096, bool write = false) {
  if (!result) result = [](const IoRequest& q, int) { return q.bytes; };
  std::string calls;
  auto queue = std::make_unique<RecordingQueue>(&calls, result);
  RecordingQueue* raw = queue.get();
  AioOptions o;
  o.block_size = block_size;
  o.queue_depth = depth;
  o.single_submit = single;
  o.overlap_events = overlap;
  OpTracker tracker;
  {
    IoWorker worker(std::move(queue), o);
    AlignedBuffer buf(blocks * 4096);
    auto op = std::make_shared<IoOp>(-1, "/tmp/mock", buf.data(), buf.size(), 0, write, &tracker);
    op->start(worker.piece_count(buf.size()), op);
    worker.enqueue(op.get(), buf.data(), buf.size(), 0);
    try {
      op->wait();
    } catch (const dscpp::Error& e) {
      if (error) *error = e.what();
    }
    if (max_in_kernel) *max_in_kernel = raw->max_in_kernel;
  }
  return calls;
}

}  // namespace

TEST_CASE("aio worker: overlap_events refills as each piece completes, queue_depth deep") {
  int deepest = 0;
  CHECK(record_worker(6, 4, true, false, nullptr, nullptr, &deepest) == "pppps4 r1 ps1 r1 ps1 r1 r1 r1 r1 ");
  CHECK(deepest == 4);
}

TEST_CASE("aio worker: without overlap_events a batch of queue_depth is waited for entirely") {
  CHECK(record_worker(10, 4, false, false) == "pppps4 r4 pppps4 r4 pps2 r2 ");
}

TEST_CASE("aio worker: single_submit submits each piece on its own") {
  CHECK(record_worker(5, 2, true, true) == "ps1 ps1 r1 ps1 r1 ps1 r1 ps1 r1 r1 ");
  CHECK(record_worker(5, 2, false, true) == "ps1 ps1 r2 ps1 ps1 r2 ps1 r1 ");
}

TEST_CASE("aio worker: short transfers are resumed, end of file and kernel errors are reported") {
  // block_size 8 KiB: every piece first moves 4 KiB, then the rest is issued again at once.
  auto half_first = [](const IoRequest& q, int attempt) -> int64_t { return attempt == 0 ? 4096 : q.bytes; };
  std::string error;
  std::string calls = record_worker(4, 2, true, false, &error, half_first, nullptr, 8192);
  CHECK(error.empty());
  CHECK(calls == "pps2 r1 ps1 r1 ps1 r1 r1 ");
  auto eof_at_second_block = [](const IoRequest& q, int) -> int64_t { return q.offset >= 4096 ? 0 : q.bytes; };
  record_worker(3, 2, true, false, &error, eof_at_second_block);
  CHECK_THAT(error, Contains("aio read of 12.00 KiB at offset 0 from /tmp/mock failed") &&
                        Contains("ends at byte 4096") && Contains("read past end of file"));
  error.clear();
  auto nospc = [](const IoRequest& q, int) -> int64_t { return q.offset == 8192 ? -ENOSPC : q.bytes; };
  record_worker(4, 4, true, false, &error, nospc);
  CHECK_THAT(error, Contains("piece of 4.00 KiB at offset 8192") && Contains("No space left on device"));
  // A write cut mid-block cannot be resumed with O_DIRECT.
  error.clear();
  auto cut = [](const IoRequest& q, int) -> int64_t { return q.offset == 4096 ? 1000 : q.bytes; };
  record_worker(2, 2, true, false, &error, cut, nullptr, 4096, true);
  CHECK_THAT(error, Contains("aio write of 8.00 KiB at offset 0 to /tmp/mock failed") &&
                        Contains("stopped after 1000 bytes") && Contains("No space left on device") &&
                        Contains("free of"));
}

TEST_CASE("aio: write then read back through each backend, sizes not a multiple of block_size") {
  TempDir dir;
  for (AioBackend backend : built_backends()) {
    for (bool overlap : {true, false}) {
      for (bool single : {false, true}) {
        DYNAMIC_SECTION(backend_name(backend) << " overlap_events=" << overlap << " single_submit=" << single) {
          AioOptions o = options_for(backend, 64 << 10, 4, 2);
          o.overlap_events = overlap;
          o.single_submit = single;
          AsyncIo aio(o);
          CHECK(aio.backend() == backend);
          std::string path = dir.path + "/f_" + backend_name(backend);
          DirectFile file(path, OpenMode::read_write);
          file.preallocate(1 << 20);
          // 300 KiB + 12 KiB at an offset of 8 KiB: 4.x blocks, split over 2 threads.
          const int64_t bytes = (300 << 10) + (12 << 10), offset = 8192;
          AlignedBuffer out(bytes), in(bytes, {.zero = true});
          fill_pattern(out.data(), bytes, offset, 7u + static_cast<uint32_t>(backend));
          CHECK(aio.write(file, out.data(), bytes, offset).wait() == bytes);
          CHECK(pread_plain(path, offset, bytes) == std::string(out.data(), static_cast<size_t>(bytes)));
          CHECK(aio.read(file, in.data(), bytes, offset).wait() == bytes);
          CHECK(std::memcmp(in.data(), out.data(), static_cast<size_t>(bytes)) == 0);
        }
      }
    }
  }
}

TEST_CASE("aio: many requests in flight on several threads land where they belong") {
  TempDir dir;
  for (AioBackend backend : built_backends()) {
    DYNAMIC_SECTION(backend_name(backend)) {
      AsyncIo aio(options_for(backend, 16 << 10, 8, 3));
      std::string path = dir.path + "/many";
      DirectFile file(path, OpenMode::read_write);
      // 48 requests of 4..188 KiB, each at its own region of a 12 MiB file.
      const int n = 48;
      const int64_t region = 256 << 10;
      file.preallocate(n * region);
      std::vector<AlignedBuffer> bufs;
      std::vector<IoHandle> handles;
      for (int i = 0; i < n; ++i) {
        int64_t bytes = (4 << 10) * (1 + (i * 7) % 47);
        bufs.emplace_back(bytes);
        fill_pattern(bufs.back().data(), bytes, i * region, 99);
        handles.push_back(aio.write(file, bufs.back().data(), bytes, i * region));
      }
      CHECK(aio.wait_all() == n);
      for (auto& h : handles) CHECK(h.done());
      for (int i = 0; i < n; ++i)
        CHECK(pread_plain(path, i * region, bufs[i].size()) == std::string(bufs[i].data(), bufs[i].size()));
      std::vector<AlignedBuffer> back;
      for (int i = 0; i < n; ++i) {
        back.emplace_back(bufs[i].size(), AlignedBufferOptions{.zero = true});
        handles[i] = aio.read(file, back.back().data(), bufs[i].size(), i * region);
      }
      for (int i = 0; i < n; ++i) {
        CHECK(handles[i].wait() == bufs[i].size());
        CHECK(std::memcmp(back[i].data(), bufs[i].data(), bufs[i].size()) == 0);
      }
      CHECK(aio.wait_all() == n);
    }
  }
}

TEST_CASE("aio: several threads submit and wait on one engine") {
  TempDir dir;
  AsyncIo aio(options_for(AioBackend::automatic, 8 << 10, 4, 2));
  std::string path = dir.path + "/shared";
  DirectFile file(path, OpenMode::read_write);
  const int submitters = 4, rounds = 10;
  const int64_t bytes = 24 << 10;
  file.preallocate(submitters * rounds * bytes);
  std::vector<std::string> failures(submitters);
  std::vector<std::thread> threads;
  for (int t = 0; t < submitters; ++t)
    threads.emplace_back([&, t] {
      AlignedBuffer out(bytes), in(bytes);
      for (int r = 0; r < rounds; ++r) {
        int64_t at = (t * rounds + r) * bytes;
        fill_pattern(out.data(), bytes, at, 5);
        aio.write_sync(file, out.data(), bytes, at);
        aio.read_sync(file, in.data(), bytes, at);
        if (std::memcmp(in.data(), out.data(), bytes) != 0) failures[t] = "mismatch at " + std::to_string(at);
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& f : failures) CHECK(f.empty());
  CHECK(aio.wait_all() == 2 * submitters * rounds);
  for (int i = 0; i < submitters * rounds; ++i) {
    AlignedBuffer expect(bytes);
    fill_pattern(expect.data(), bytes, i * bytes, 5);
    CHECK(pread_plain(path, i * bytes, bytes) == std::string(expect.data(), bytes));
  }
}

TEST_CASE("aio: misaligned requests and reads past EOF are refused with the reason") {
  TempDir dir;
  AsyncIo aio(AioOptions{});
  std::string path = dir.path + "/f";
  DirectFile file(path, OpenMode::read_write);
  AlignedBuffer buf(64 << 10);
  aio.write_sync(file, buf.data(), 16 << 10, 0);
  CHECK_THROWS_WITH(aio.write(file, buf.data() + 512, 4096, 0),
                    Contains(path) && Contains("not aligned to 4096") && Contains("AlignedBuffer"));
  CHECK_THROWS_WITH(aio.write(file, buf.data(), 1000, 0), Contains("multiples of 4096") && Contains("pad"));
  CHECK_THROWS_WITH(aio.read(file, buf.data(), 4096, 100), Contains("multiples of 4096"));
  CHECK_THROWS_WITH(aio.read(file, buf.data(), 32 << 10, 0), Contains("read past end of file") && Contains(path) &&
                                                                 Contains("16384 bytes") && Contains("[0, 32768)"));
  DirectFile read_only(path, OpenMode::read);
  CHECK_THROWS_WITH(aio.write(read_only, buf.data(), 4096, 0), Contains("opened for reading only"));
  IoHandle none;
  CHECK_THROWS_WITH(none.wait(), Contains("empty IoHandle"));
}

TEST_CASE("aio: a file removed underneath is reported, not silently lost") {
  TempDir dir;
  AsyncIo aio(AioOptions{});
  std::string path = dir.path + "/gone";
  DirectFile file(path, OpenMode::read_write);
  AlignedBuffer buf(8192);
  aio.write_sync(file, buf.data(), 8192, 0);
  REQUIRE(::unlink(path.c_str()) == 0);
  CHECK_THROWS_WITH(aio.write(file, buf.data(), 8192, 0), Contains(path) && Contains("was removed"));
  CHECK_THROWS_WITH(DirectFile(path, OpenMode::read), Contains(path) && Contains("does not exist"));
  fs::remove_all(dir.path + "/sub");
  CHECK_THROWS_WITH(DirectFile(dir.path + "/sub/x", OpenMode::write),
                    Contains(dir.path + "/sub") && Contains("swap directory removed"));
}

TEST_CASE("aio: an unwritable directory is a clear error") {
  TempDir dir;
  fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                                fs::perms::others_exec | fs::perms::group_read | fs::perms::group_exec);
  // root ignores permission bits, so the attempt runs as `nobody` when the test runs as root.
  std::string file_msg = error_in_child([&] { DirectFile(dir.path + "/x", OpenMode::write); }, true);
  CHECK_THAT(file_msg, Contains(dir.path + "/x") && Contains("Permission denied") && Contains("writable"));
  std::string swap_msg = error_in_child([&] { SwapDir(dir.path, "j", 0); }, true);
  CHECK_THAT(swap_msg, Contains("nvme_path " + dir.path) && Contains("not writable"));
}

TEST_CASE("aio: the backend can be forced through the environment") {
  for (AioBackend backend : built_backends()) {
    ::setenv(kBackendEnv, backend_name(backend), 1);
    CHECK(AsyncIo(AioOptions{}).backend() == backend);
  }
  ::setenv(kBackendEnv, "posix", 1);
  CHECK_THROWS_WITH(AsyncIo(AioOptions{}), Contains("DSCPP_AIO_BACKEND") && Contains("posix"));
  ::unsetenv(kBackendEnv);
}

TEST_CASE("swap dir: created with an owner marker, refused while in use, removed at the end") {
  TempDir root;
  std::string path;
  {
    SwapDir d(root.path, "job/7", 3);
    path = d.path();
    CHECK(path == root.path + "/dscpp-job_7-rank3");
    CHECK(fs::is_directory(path));
    auto owner = read_swap_owner(path);
    REQUIRE(owner);
    CHECK(owner->pid == ::getpid());
    CHECK(owner->start_ticks > 0);
    CHECK_THROWS_WITH(SwapDir(root.path, "job/7", 3),
                      Contains(path) && Contains("in use by pid " + std::to_string(::getpid())));
    std::ofstream(d.file("x.swp")) << "data";
  }
  CHECK_FALSE(fs::exists(path));
  CHECK(fs::is_empty(root.path));
  CHECK_THROWS_WITH(SwapDir(root.path + "/nope", "j", 0), Contains("does not exist") && Contains("mkdir -p"));
}

TEST_CASE("swap dir: stale directories of dead owners are removed, live and foreign ones kept") {
  TempDir root;
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);  // reaped: this pid no longer names a process
  auto make = [&](const std::string& name, SwapDirOwner owner) {
    fs::create_directory(root.path + "/" + name);
    std::ofstream(root.path + "/" + name + "/" + kSwapOwnerFile) << format_swap_owner(owner);
    std::ofstream(root.path + "/" + name + "/a.swp") << "x";
  };
  SwapDirOwner me = current_swap_owner();
  SwapDirOwner gone = me;
  gone.pid = dead;
  SwapDirOwner reused = me;  // our pid, but another process's start time: the pid was reused
  reused.start_ticks = me.start_ticks + 1;
  SwapDirOwner rebooted = me;
  rebooted.boot_id = "00000000-0000-0000-0000-000000000000";
  SwapDirOwner foreign = gone;
  foreign.host = "some-other-host";
  make("dscpp-old-rank0", gone);
  make("dscpp-reused-rank0", reused);
  make("dscpp-boot-rank0", rebooted);
  make("dscpp-live-rank0", me);
  make("dscpp-far-rank0", foreign);
  make("unrelated", gone);
  fs::create_directory(root.path + "/dscpp-nomarker-rank0");

  SwapDir d(root.path, "new", 0);  // the constructor cleans stale ones
  CHECK_FALSE(fs::exists(root.path + "/dscpp-old-rank0"));
  CHECK_FALSE(fs::exists(root.path + "/dscpp-reused-rank0"));
  CHECK_FALSE(fs::exists(root.path + "/dscpp-boot-rank0"));
  CHECK(fs::exists(root.path + "/dscpp-live-rank0"));
  CHECK(fs::exists(root.path + "/dscpp-far-rank0"));
  CHECK(fs::exists(root.path + "/unrelated"));
  CHECK(fs::exists(root.path + "/dscpp-nomarker-rank0"));

  // The same job id and rank left behind by a dead process is replaced, not refused.
  make("dscpp-again-rank1", gone);
  SwapDir again(root.path, "again", 1);
  CHECK(read_swap_owner(again.path())->pid == ::getpid());
  CHECK_FALSE(fs::exists(again.file("a.swp")));
}

TEST_CASE("swap dir: removed when its process is killed") {
  TempDir root;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    SwapDir d(root.path, "crash", 0);
    std::ofstream(d.file("x.swp")) << "data";
    (void)!::write(ready[1], "1", 1);
    ::raise(SIGKILL);  // no destructor runs
  }
  ::close(ready[1]);
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  ::waitpid(child, nullptr, 0);
  std::string path = root.path + "/dscpp-crash-rank0";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (fs::exists(path) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(fs::exists(path));
}

// A full disk, made with a 1 MiB tmpfs in a private mount namespace (so nothing leaks to the
// host even if the test dies). Hidden: run as `test_aio [disk_full]`; exits 77 (skipped) when
// this process may not mount.
TEST_CASE("aio: disk full is a clear error", "[.disk_full]") {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    WARN("cannot create a mount namespace (needs root): skipped");
    std::exit(77);
  }
  TempDir dir;
  REQUIRE(::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=1m") == 0);
  {
    DirectFile prealloc(dir.path + "/big", OpenMode::write);
    CHECK_THROWS_WITH(prealloc.preallocate(8 << 20), Contains(dir.path + "/big") &&
                                                         Contains("No space left on device") && Contains("free of") &&
                                                         Contains("point nvme_path at a larger disk"));
  }
  ::unlink((dir.path + "/big").c_str());
  for (AioBackend backend : built_backends()) {
    AsyncIo aio(options_for(backend, 256 << 10, 4, 1));
    DirectFile file(dir.path + "/w", OpenMode::write);
    AlignedBuffer buf(4 << 20, {.zero = true});
    CHECK_THROWS_WITH(aio.write(file, buf.data(), buf.size(), 0).wait(),
                      Contains("aio write") && Contains(dir.path + "/w") && Contains("No space left on device"));
    file.close();
    ::unlink((dir.path + "/w").c_str());
  }
  ::umount2(dir.path.c_str(), MNT_DETACH);
}
