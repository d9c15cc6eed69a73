// The shared-memory engine: the ranks of a group on one host exchange data through one POSIX
// shared-memory segment, DeepSpeed's / NCCL's CPU path. Per chunk ("round"), every rank copies
// its input into its slot, ranks reduce disjoint ranges across all slots, and all copy the
// result out. Slots are double-buffered: a rank may overwrite buffer b in round t once every
// rank has arrived at round t-1's first barrier, which it only does after reading round t-2
// (the same buffer). That saves the "everyone has copied out" barrier of each round.
//
// Synchronisation is one monotonically increasing arrival counter per rank (its own cache
// line). Waiting for a peer spins briefly and then sleeps on that counter with a shared futex,
// so oversubscribed ranks (tests run 4 ranks on 2 cores) hand over the CPU instead of burning
// their time slice. Every wait has the group timeout and checks the peer's pid about every
// 100 ms, so a crashed or stuck rank turns into an error on the others instead of a hang.
#include "collectives/backend.h"
#include "collectives/shm_reduce.h"
#include "core/knobs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace dscpp::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kShmMagic = 0x6473637070736d31ull;  // "dscppsm1"
constexpr size_t kLine = 128;                       // two lines: the adjacent-line prefetcher pairs them
constexpr size_t kAlign = 64;                       // slot ranges start on cache lines
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
// Below this many bytes an allreduce uses one round with a single barrier in which every
// rank reduces the whole buffer: latency matters more there than the N-fold reduce work.
constexpr size_t kSmallAllreduce = 16 * 1024;

struct alignas(kLine) RankCtl {
  std::atomic<uint32_t> arrive;    // futex word: barriers this rank has reached
  std::atomic<uint32_t> sleepers;  // peers asleep on `arrive`: wake only when someone sleeps
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> left;    // set when this rank closes the backend
  std::atomic<uint64_t> op_sig;  // (op sequence << 32) | hash of the op's shape
};

struct alignas(kLine) Header {
  uint64_t magic;
  int32_t size;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  std::atomic<uint32_t> abort;  // 0 fine, 1 a rank is writing `reason`, 2 reason published
  char reason[512];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the waiters are other processes mapping the same pages.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// A peer that exited is either gone (ESRCH) or a zombie its parent has not reaped yet.
bool process_exited(int pid) {
  if (pid <= 0 || pid == getpid()) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;  // another pid namespace: trust kill()
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return 1;
}

// Per-rank slot size. Big enough that the per-round barriers are noise, small enough that a
// round's slots stay in L2 while they are reduced and copied out (measured: see the commit).
size_t slot_bytes_setting() {
  size_t bytes = 512 * 1024;
  if (const char* env = knob("DSCPP_SHM_SLOT_KB")) {
    const long kb = std::strtol(env, nullptr, 10);
    if (kb >= 4 && kb <= 64 * 1024) bytes = size_t(kb) * 1024;
  }
  return bytes;
}

class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(const GroupContext& context);
  ~ShmBackend() override;
  ShmBackend(const ShmBackend&) = delete;
  ShmBackend& operator=(const ShmBackend&) = delete;

  std::string_view name() const override { return "shm"; }
  int rank() const override { return ctx_.rank; }
  int size() const override { return ctx_.size; }
  bool supports(DType dtype, ReduceOp op) const override { return shm::reduce_supported(dtype, op); }
  void run(const OpDesc& op) override;
  std::unique_ptr<Backend> split(const SplitPlan& plan) override;

 private:
  void attach();
  [[noreturn]] void fail_group(const std::string& message);
  void check_abort();
  void barrier();
  void wait_for(int peer, uint32_t target);
  void check_signatures();
  int next_buffer() { return static_cast<int>(round_++ & 1u); }
  char* slot(int buffer, int rank) const { return data_ + (size_t(buffer) * ctx_.size + rank) * slot_bytes_; }

  void allreduce(const OpDesc& op, const char* in, char* out);
  void reduce_scatter(const OpDesc& op, const char* in, char* out);
  void allgather(const OpDesc& op, const char* in, char* out);
  void broadcast(const OpDesc& op, const char* in, char* out);
  void all_to_all(const OpDesc& op, const char* in, char* out);

  GroupContext ctx_;
  size_t slot_bytes_ = 0;
  size_t map_bytes_ = 0;
  void* map_ = nullptr;
  Header* header_ = nullptr;
  RankCtl* ctl_ = nullptr;
  char* data_ = nullptr;
  uint32_t step_ = 0;   // barriers passed; every rank counts the same
  uint64_t round_ = 0;  // buffer rounds used; picks the double buffer
  uint32_t seq_ = 0;    // collectives issued
  uint32_t sig_ = 0;
  bool check_sig_ = false;
  std::chrono::microseconds spin_{0};
  std::string_view current_ = "setup";
  std::string broken_;
  bool simd_ = shm::cpu_has_avx2();
};

ShmBackend::ShmBackend(const GroupContext& context) : ctx_(context) {
  if (ctx_.size < 1 || ctx_.rank < 0 || ctx_.rank >= ctx_.size)
    fail("shm group '{}': rank {} is outside a group of size {}", ctx_.name, ctx_.rank, ctx_.size);
  if (!ctx_.store) fail("shm group '{}': no store to exchange the segment name through", ctx_.name);
  // Spinning only pays when every rank has a core; otherwise it steals the time slice from
  // the very peer being waited for.
  spin_ = ctx_.size <= usable_cpus() ? std::chrono::microseconds(50) : std::chrono::microseconds(2);
  slot_bytes_ = slot_bytes_setting();
  attach();
}

void ShmBackend::attach() {
  const size_t header_bytes = round_up(sizeof(Header) + sizeof(RankCtl) * size_t(ctx_.size), 4096);
  const auto timeout_s = ctx_.timeout.count() / 1e3;
  std::string seg_name;
  int fd = -1;
  if (ctx_.rank == 0) {
    static std::atomic<uint64_t> counter{0};
    std::string group;
    for (char c : ctx_.name) group += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    seg_name =
        fmt::format("/dscpp-shm-{}-{}-{}-{:08x}", group.substr(0, 64), getpid(), counter++, std::random_device{}());
    fd = shm_open(seg_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) fail("shm group '{}': cannot create {}: {}", ctx_.name, seg_name, std::strerror(errno));
    map_bytes_ = header_bytes + 2 * size_t(ctx_.size) * slot_bytes_;
    // posix_fallocate, not ftruncate: a full /dev/shm (docker's default is 64 MB) must fail
    // here with a message, not with SIGBUS in the middle of a collective.
    if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(map_bytes_)); err != 0) {
      close(fd);
      shm_unlink(seg_name.c_str());
      fail("shm group '{}': cannot allocate {:.1f} MB in /dev/shm: {} (containers: raise --shm-size)", ctx_.name,
           map_bytes_ / 1e6, std::strerror(err));
    }
  } else {
    try {
      seg_name = ctx_.store->get("shm/name", ctx_.timeout);
    } catch (const StoreTimeout&) {
      fail("shm group '{}': rank 0 did not publish its shared-memory segment within {:.1f} s", ctx_.name, timeout_s);
    }
    fd = shm_open(seg_name.c_str(), O_RDWR, 0600);
    if (fd < 0) fail("shm group '{}': cannot open {} made by rank 0: {}", ctx_.name, seg_name, std::strerror(errno));
    struct stat st {};
    fstat(fd, &st);
    map_bytes_ = static_cast<size_t>(st.st_size);
  }
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    if (ctx_.rank == 0) shm_unlink(seg_name.c_str());
    fail("shm group '{}': cannot map {} ({} bytes): {}", ctx_.name, seg_name, map_bytes_, std::strerror(map_errno));
  }
  header_ = static_cast<Header*>(map_);
  ctl_ = reinterpret_cast<RankCtl*>(static_cast<char*>(map_) + sizeof(Header));
  data_ = static_cast<char*>(map_) + header_bytes;
  if (ctx_.rank == 0) {
    header_ = new (map_) Header{};
    header_->size = ctx_.size;
    header_->slot_bytes = slot_bytes_;
    header_->total_bytes = map_bytes_;
    for (int r = 0; r < ctx_.size; ++r) new (&ctl_[r]) RankCtl{};
    header_->magic = kShmMagic;
    ctx_.store->set("shm/name", seg_name);
  } else if (header_->magic != kShmMagic || header_->size != ctx_.size || header_->total_bytes != map_bytes_) {
    fail("shm group '{}': segment {} is for {} ranks, this group has {} (ranks disagree about the group)", ctx_.name,
         seg_name, header_->size, ctx_.size);
  } else {
    slot_bytes_ = header_->slot_bytes;  // rank 0's setting wins
  }
  ctl_[ctx_.rank].pid.store(getpid());
  // Rank 0 unlinks the name once everyone has mapped it: from then on the pages live exactly as
  // long as some rank maps them, so a crash cannot leak /dev/shm.
  if (ctx_.rank == 0) {
    std::vector<std::string> keys;
    for (int r = 1; r < ctx_.size; ++r) keys.push_back(fmt::format("shm/mapped/{}", r));
    const auto missing = ctx_.store->wait(keys, ctx_.timeout);
    shm_unlink(seg_name.c_str());
    if (!missing.empty()) {
      std::vector<int> ranks;
      for (const auto& key : missing) ranks.push_back(std::stoi(key.substr(key.rfind('/') + 1)));
      fail("shm group '{}': ranks {} did not map the shared-memory segment within {:.1f} s", ctx_.name,
           format_rank_list(ranks), timeout_s);
    }
    ctx_.store->set("shm/ready", "1");
  } else {
    ctx_.store->set(fmt::format("shm/mapped/{}", ctx_.rank), "1");
    try {
      ctx_.store->get("shm/ready", ctx_.timeout);
    } catch (const StoreTimeout&) {
      fail("shm group '{}': rank 0 did not finish setting up the segment within {:.1f} s", ctx_.name, timeout_s);
    }
  }
}

ShmBackend::~ShmBackend() {
  if (!map_) return;
  // Peers still waiting for this rank (only if they issue more collectives than it did) learn
  // at once that it is gone instead of timing out.
  auto& me = ctl_[ctx_.rank];
  me.left.store(1);
  futex(&me.arrive, FUTEX_WAKE, INT_MAX, nullptr);
  munmap(map_, map_bytes_);
}

void ShmBackend::fail_group(const std::string& message) {
  // Publish the first failure so every rank blocked in this group gives up with the same
  // explanation right away, rather than each discovering it on its own after a timeout.
  uint32_t expected = 0;
  if (header_->abort.compare_exchange_strong(expected, 1)) {
    std::snprintf(header_->reason, sizeof header_->reason, "%s", message.c_str());
    header_->abort.store(2);
    for (int r = 0; r < ctx_.size; ++r) futex(&ctl_[r].arrive, FUTEX_WAKE, INT_MAX, nullptr);
  }
  throw PeerFailure(message);  // every group failure here is a peer's: gone, late or diverging
}

void ShmBackend::check_abort() {
  uint32_t state = header_->abort.load(std::memory_order_acquire);
  if (state == 0) return;
  while (state == 1) {
    sched_yield();
    state = header_->abort.load(std::memory_order_acquire);
  }
  throw PeerFailure(header_->reason);
}

void ShmBackend::wait_for(int peer, uint32_t target) {
  RankCtl& ctl = ctl_[peer];
  auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - target) >= 0; };
  if (reached(ctl.arrive.load(std::memory_order_acquire))) return;
  auto start = Clock::now();
  const auto spin_until = start + spin_;
  for (int i = 1;; ++i) {
    if (reached(ctl.arrive.load(std::memory_order_acquire))) return;
#if DSCPP_SHM_X86
    _mm_pause();
#endif
    if (i % 64 == 0 && (start = Clock::now()) >= spin_until) break;
  }
  const auto deadline = start + ctx_.timeout;
  auto next_liveness = start + kLivenessPeriod;
  for (;;) {
    check_abort();
    if (ctl.left.load())
      fail_group(fmt::format("shm group '{}': rank {} (pid {}) closed its shm backend before {}", ctx_.name, peer,
                             ctl.pid.load(), current_));
    // Dekker with the waker (barrier()): it stores `arrive` then reads `sleepers`, we bump
    // `sleepers` then read `arrive`; seq_cst guarantees one of us sees the other, and the
    // futex re-checks the value atomically against a wake in between.
    ctl.sleepers.fetch_add(1);
    const uint32_t seen = ctl.arrive.load();
    if (reached(seen)) {
      ctl.sleepers.fetch_sub(1);
      return;
    }
    const auto now = Clock::now();
    const auto nap = std::min<Clock::duration>(kLivenessPeriod, std::max<Clock::duration>(deadline - now, {}));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(nap).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    futex(&ctl.arrive, FUTEX_WAIT, seen, &ts);
    ctl.sleepers.fetch_sub(1);
    if (reached(ctl.arrive.load(std::memory_order_acquire))) return;
    check_abort();
    const int pid = ctl.pid.load();
    const auto after = Clock::now();
    if (after >= next_liveness) {
      next_liveness = after + kLivenessPeriod;
      if (process_exited(pid))
        fail_group(fmt::format("shm group '{}': rank {} (pid {}) exited during {}", ctx_.name, peer, pid, current_));
    }
    if (after >= deadline)
      fail_group(fmt::format("shm group '{}': rank {} did not reach {} within {:.1f} s", ctx_.name, peer, current_,
                             ctx_.timeout.count() / 1e3));
  }
}

void ShmBackend::barrier() {
  RankCtl& me = ctl_[ctx_.rank];
  ++step_;
  me.arrive.store(step_);  // seq_cst: releases our slot writes and orders before the load below
  if (me.sleepers.load() != 0) futex(&me.arrive, FUTEX_WAKE, INT_MAX, nullptr);
  for (int r = 1; r < ctx_.size; ++r) wait_for((ctx_.rank + r) % ctx_.size, step_);
  if (check_sig_) check_signatures();
}

// Ranks issuing different collectives would read each other's slots as the wrong shape;
// catch it at the op's first barrier, before anyone reads a peer's slot.
void ShmBackend::check_signatures() {
  check_sig_ = false;
  for (int r = 0; r < ctx_.size; ++r) {
    const uint64_t sig = ctl_[r].op_sig.load(std::memory_order_acquire);
    // A peer already in its next collective has moved on: it matched this one.
    if (uint32_t(sig >> 32) == seq_ && uint32_t(sig) != sig_)
      fail_group(fmt::format(
          "shm group '{}': collective #{} differs between ranks: rank {} called {} and rank {} something else (every "
          "rank must issue the same collectives with the same count, dtype, op and root)",
          ctx_.name, seq_, ctx_.rank, current_, r));
  }
}

void ShmBackend::run(const OpDesc& op) {
  if (!broken_.empty()) fail("shm group '{}' is unusable after an earlier failure: {}", ctx_.name, broken_);
  current_ = op_kind_name(op.kind);
  ++seq_;
  const bool reduces = op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter;
  const uint64_t shape = (uint64_t(op.kind) << 56) ^ (uint64_t(op.dtype) << 48) ^
                         (reduces ? uint64_t(op.reduce) << 40 : 0) ^
                         (op.kind == OpKind::broadcast ? uint64_t(uint32_t(op.root)) << 20 : 0) ^ op.count;
  sig_ = uint32_t(std::hash<uint64_t>{}(shape) ^ (std::hash<uint64_t>{}(shape) >> 32));
  ctl_[ctx_.rank].op_sig.store((uint64_t(seq_) << 32) | sig_, std::memory_order_relaxed);
  check_sig_ = true;
  const auto* in = static_cast<const char*>(op.input ? op.input : op.output);
  auto* out = static_cast<char*>(op.output ? op.output : const_cast<void*>(op.input));
  if (op.kind != OpKind::barrier && op.count != 0 && (!in || !out))
    fail("shm group '{}': {} of {} elements got a null buffer", ctx_.name, current_, op.count);
  if (op.kind == OpKind::broadcast && (op.root < 0 || op.root >= ctx_.size))
    fail("shm group '{}': broadcast root {} is outside the group of {}", ctx_.name, op.root, ctx_.size);
  try {
    switch (op.kind) {
      case OpKind::allreduce:
        return allreduce(op, in, out);
      case OpKind::reduce_scatter:
        return reduce_scatter(op, in, out);
      case OpKind::allgather:
        return allgather(op, in, out);
      case OpKind::broadcast:
        return broadcast(op, in, out);
      case OpKind::all_to_all:
        return all_to_all(op, in, out);
      case OpKind::barrier:
        return barrier();
    }
  } catch (const Error& e) {
    broken_ = e.what();
    throw;
  }
}

// Element range [begin, end) of `n` that rank r reduces: equal shares, cut on cache lines so
// that no two ranks write the same line.
std::pair<size_t, size_t> share(size_t n, size_t elem, int r, int size) {
  const size_t per_line = kAlign / elem;
  const size_t per = round_up((n + size - 1) / size, per_line);
  const size_t begin = std::min(n, per * r);
  return {begin, std::min(n, begin + per)};
}

void ShmBackend::allreduce(const OpDesc& op, const char* in, char* out) {
  const int n = ctx_.size, me = ctx_.rank;
  const size_t elem = dtype_size(op.dtype), bytes = op.count * elem;
  const void* srcs[256];  // size is capped at 256 ranks below
  if (n == 1) {
    if (in != out && bytes) std::memcpy(out, in, bytes);
    return;
  }
  if (n > 256) fail("shm group '{}': {} ranks on one host exceed the 256 this engine supports", ctx_.name, n);
  if (bytes <= std::min(kSmallAllreduce, slot_bytes_)) {
    if (bytes == 0) return;
    const int b = next_buffer();
    std::memcpy(slot(b, me), in, bytes);
    barrier();
    for (int r = 0; r < n; ++r) srcs[r] = slot(b, r);
    shm::reduce(op.dtype, op.reduce, out, srcs, n, op.count, n, simd_);
    return;
  }
  const size_t per_round = slot_bytes_ / elem;
  for (size_t off = 0; off < op.count; off += per_round) {
    const size_t len = std::min(per_round, op.count - off);
    const int b = next_buffer();
    // Peers only read my slot outside my share, and I reduce my share straight from my own
    // buffer: 1/n less copying in and out.
    const auto [lo, hi] = share(len, elem, me, n);
    std::memcpy(slot(b, me), in + off * elem, lo * elem);
    std::memcpy(slot(b, me) + hi * elem, in + (off + hi) * elem, (len - hi) * elem);
    barrier();
    for (int r = 0; r < n; ++r) srcs[r] = r == me ? in + (off + lo) * elem : slot(b, r) + lo * elem;
    char* mine = out + (off + lo) * elem;
    shm::reduce(op.dtype, op.reduce, mine, srcs, n, hi - lo, n, simd_, slot(b, me) + lo * elem);
    barrier();
    for (int k = 1; k < n; ++k) {
      const int r = (me + k) % n;  // ranks start at different peers: spreads the cross-core reads
      const auto [rlo, rhi] = share(len, elem, r, n);
      if (rhi > rlo) std::memcpy(out + (off + rlo) * elem, slot(b, r) + rlo * elem, (rhi - rlo) * elem);
    }
  }
}

void ShmBackend::reduce_scatter(const OpDesc& op, const char* in, char* out) {
  const int n = ctx_.size, me = ctx_.rank;
  const size_t elem = dtype_size(op.dtype);
  const void* srcs[256];
  if (n == 1) {
    // Every rank's slice is its own: avg over one rank is the identity, so this is a copy.
    if (op.count) std::memmove(out, in, op.count * elem);
    return;
  }
  if (n > 256) fail("shm group '{}': {} ranks on one host exceed the 256 this engine supports", ctx_.name, n);
  const size_t per_round = std::max<size_t>(1, slot_bytes_ / (elem * n));
  for (size_t off = 0; off < op.count; off += per_round) {
    const size_t len = std::min(per_round, op.count - off);
    const int b = next_buffer();
    for (int k = 0; k < n; ++k) std::memcpy(slot(b, me) + k * len * elem, in + (k * op.count + off) * elem, len * elem);
    barrier();
    for (int r = 0; r < n; ++r) srcs[r] = slot(b, r) + me * len * elem;
    shm::reduce(op.dtype, op.reduce, out + off * elem, srcs, n, len, n, simd_);
  }
}

void ShmBackend::allgather(const OpDesc& op, const char* in, char* out) {
  const int n = ctx_.size, me = ctx_.rank;
  const size_t elem = dtype_size(op.dtype), bytes = op.count * elem;
  if (in != out + me * bytes && bytes) std::memcpy(out + me * bytes, in, bytes);
  if (n == 1) return;
  const size_t per_round = slot_bytes_ / elem;
  for (size_t off = 0; off < op.count; off += per_round) {
    const size_t len = std::min(per_round, op.count - off);
    const int b = next_buffer();
    std::memcpy(slot(b, me), in + off * elem, len * elem);
    barrier();
    for (int k = 1; k < n; ++k) {
      const int r = (me + k) % n;
      std::memcpy(out + (r * op.count + off) * elem, slot(b, r), len * elem);
    }
  }
}

void ShmBackend::broadcast(const OpDesc& op, const char* in, char* out) {
  const int n = ctx_.size, me = ctx_.rank;
  const size_t elem = dtype_size(op.dtype);
  if (n == 1) {
    if (in != out && op.count) std::memcpy(out, in, op.count * elem);
    return;
  }
  // One sender: the whole buffer half (every rank's slot) is one contiguous staging area.
  const size_t per_round = slot_bytes_ * n / elem;
  for (size_t off = 0; off < op.count; off += per_round) {
    const size_t len = std::min(per_round, op.count - off);
    const int b = next_buffer();
    if (me == op.root) {
      std::memcpy(slot(b, 0), in + off * elem, len * elem);
      if (in != out) std::memcpy(out + off * elem, in + off * elem, len * elem);
    }
    barrier();
    if (me != op.root) std::memcpy(out + off * elem, slot(b, 0), len * elem);
  }
}

void ShmBackend::all_to_all(const OpDesc& op, const char* in, char* out) {
  const int n = ctx_.size, me = ctx_.rank;
  const size_t elem = dtype_size(op.dtype), bytes = op.count * elem;
  if (bytes) std::memcpy(out + me * bytes, in + me * bytes, bytes);
  if (n == 1) return;
  const size_t per_round = std::max<size_t>(1, slot_bytes_ / (elem * n));
  for (size_t off = 0; off < op.count; off += per_round) {
    const size_t len = std::min(per_round, op.count - off);
    const int b = next_buffer();
    for (int k = 0; k < n; ++k)
      if (k != me) std::memcpy(slot(b, me) + k * len * elem, in + (k * op.count + off) * elem, len * elem);
    barrier();
    for (int k = 1; k < n; ++k) {
      const int r = (me + k) % n;
      std::memcpy(out + (r * op.count + off) * elem, slot(b, r) + me * len * elem, len * elem);
    }
  }
}

std::unique_ptr<Backend> ShmBackend::split(const SplitPlan& plan) {
  if (plan.color < 0) return nullptr;
  return std::make_unique<ShmBackend>(plan.context);
}

}  // namespace

std::unique_ptr<Backend> make_shm_backend(const GroupContext& context) {
  return std::make_unique<ShmBackend>(context);
}

}  // namespace dscpp::comm
