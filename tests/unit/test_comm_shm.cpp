// The shared-memory backend, called directly (no Communicator): every op, dtype and size with
// 2-4 thread ranks against a serial reference, the reduction kernels (AVX2 vs scalar), splits,
// failure detection (stalled, closed, crashed peers; mismatched ops) and /dev/shm hygiene.
//
// Rank threads never use Catch2 assertions (not thread-safe): they collect failures as strings
// that the main thread checks.
#include "collectives/backend.h"
#include "collectives/shm_reduce.h"
#include "core/half.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

using namespace dscpp;
using namespace dscpp::comm;
using Clock = std::chrono::steady_clock;

namespace {

double get(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::f16:
      return static_cast<float>(static_cast<const fp16_t*>(p)[i]);
    case DType::bf16:
      return static_cast<float>(static_cast<const bf16_t*>(p)[i]);
    case DType::f64:
      return static_cast<const double*>(p)[i];
    case DType::i8:
      return static_cast<const int8_t*>(p)[i];
    case DType::u8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::i32:
      return static_cast<const int32_t*>(p)[i];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

void put(DType t, void* p, size_t i, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::f16:
      static_cast<fp16_t*>(p)[i] = fp16_t(static_cast<float>(v));
      break;
    case DType::bf16:
      static_cast<bf16_t*>(p)[i] = bf16_t(static_cast<float>(v));
      break;
    case DType::f64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::i8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::u8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
  }
}

bool is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

// Small integers: every sum of up to 4 of them is exact in every dtype (bf16 holds integers
// up to 256 exactly, int8 up to 127), so the reference needs no tolerance.
double value(DType t, int rank, size_t i) {
  const int v = static_cast<int>((i * 7 + size_t(rank) * 13) % 11);
  return t == DType::u8 ? v : v - 5;
}

// The exact reduction of value(t, r, i) over ranks, then rounded the way the backend does.
double reference(DType t, ReduceOp op, int size, size_t i) {
  double acc = value(t, 0, i);
  for (int r = 1; r < size; ++r) {
    const double x = value(t, r, i);
    acc = op == ReduceOp::max ? std::max(acc, x) : op == ReduceOp::min ? std::min(acc, x) : acc + x;
  }
  if (op == ReduceOp::avg) {
    if (t == DType::f64)
      acc /= size;
    else if (is_float(t))
      acc = static_cast<float>(acc) / static_cast<float>(size);  // fp32 divide, then round
    else
      acc = std::trunc(acc / size);
  }
  unsigned char buf[8];
  put(t, buf, 0, acc);
  return get(t, buf, 0);
}

struct Case {
  OpKind kind;
  DType dtype;
  ReduceOp reduce;
  size_t count;
};

const DType kTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i8, DType::u8, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), (size_t(1) << 20) + 3})
    for (DType t : kTypes) {
      for (ReduceOp op : kOps) {
        cases.push_back({OpKind::allreduce, t, op, count});
        cases.push_back({OpKind::reduce_scatter, t, op, count});
      }
      for (OpKind k : {OpKind::allgather, OpKind::broadcast, OpKind::all_to_all, OpKind::barrier})
        cases.push_back({k, t, ReduceOp::sum, count});
    }
  return cases;
}

// The big size runs the multi-round paths, which are the same code for every dtype and op
// apart from the reduce kernel (tested on its own below): fp32 covers all ops on 3 ranks
// (uneven shares), fp16/bf16 the vector conversions, 2 ranks the common case. Enough to stay
// fast under ASan.
bool included(const Case& c, int size) {
  if (c.count <= 1000) return true;
  if (size == 4) return false;
  if (size == 2) return c.dtype == DType::f32 && c.reduce == ReduceOp::sum;
  if (c.dtype == DType::f32) return true;
  return (c.dtype == DType::bf16 || c.dtype == DType::f16) && c.reduce == ReduceOp::sum &&
         (c.kind == OpKind::allreduce || c.kind == OpKind::reduce_scatter);
}

std::string describe(const Case& c, int size) {
  static const char* kinds[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier", "all_to_all"};
  static const char* ops[] = {"sum", "avg", "max", "min"};
  return fmt::format("{} {} {} x{} on {} ranks", kinds[int(c.kind)], dtype_name(c.dtype), ops[int(c.reduce)], c.count,
                     size);
}

GroupContext context(int rank, int size, const std::shared_ptr<Store>& store, Millis timeout = Millis(20000),
                     const std::string& prefix = "g") {
  GroupContext ctx;
  ctx.store = std::make_shared<PrefixStore>(prefix, store);
  ctx.rank = rank;
  ctx.size = size;
  ctx.timeout = timeout;
  return ctx;
}

// Runs one case on this rank and returns a description of the first wrong element, if any.
std::string run_case(Backend& b, const Case& c, int me, int n) {
  const size_t e = dtype_size(c.dtype), cnt = c.count;
  const size_t in_elems = (c.kind == OpKind::reduce_scatter || c.kind == OpKind::all_to_all) ? n * cnt : cnt;
  const size_t out_elems = (c.kind == OpKind::allgather || c.kind == OpKind::all_to_all) ? n * cnt
                           : c.kind == OpKind::reduce_scatter                            ? cnt
                                                                                         : in_elems;
  std::vector<unsigned char> in(in_elems * e + 1), out(out_elems * e + 1);
  for (size_t i = 0; i < in_elems; ++i) put(c.dtype, in.data(), i, value(c.dtype, me, i));
  const int root = static_cast<int>(cnt % n);
  OpDesc op{c.kind, in.data(), out.data(), cnt, c.dtype, c.reduce, root};
  if (c.kind == OpKind::allreduce || c.kind == OpKind::broadcast) op.output = in.data();  // in place
  b.run(op);
  const unsigned char* res = (c.kind == OpKind::allreduce || c.kind == OpKind::broadcast) ? in.data() : out.data();
  for (size_t i = 0; i < out_elems; ++i) {
    double want = 0;
    switch (c.kind) {
      case OpKind::allreduce:
        want = reference(c.dtype, c.reduce, n, i);
        break;
      case OpKind::reduce_scatter:
        want = reference(c.dtype, c.reduce, n, me * cnt + i);
        break;
      case OpKind::allgather:
        want = value(c.dtype, int(i / cnt), i % cnt);
        break;
      case OpKind::broadcast:
        want = value(c.dtype, root, i);
        break;
      case OpKind::all_to_all:
        want = value(c.dtype, int(i / cnt), me * cnt + i % cnt);
        break;
      case OpKind::barrier:
        break;
    }
    const double got = get(c.dtype, res, i);
    if (got != want) return fmt::format("{}: rank {} element {}: got {}, want {}", describe(c, n), me, i, got, want);
  }
  return {};
}

}  // namespace

TEST_CASE("shm: every op, dtype and size matches a serial reference") {
  const auto cases = all_cases();
  for (int size : {2, 3, 4}) {
    std::mutex mutex;
    std::vector<std::string> failures;
    dscpp::test::run_thread_ranks(size, [&](int rank, int n, std::shared_ptr<Store> store) {
      auto backend = make_shm_backend(context(rank, n, store));
      for (const auto& c : cases) {
        if (!included(c, n)) continue;
        auto why = run_case(*backend, c, rank, n);
        if (!why.empty()) {
          std::lock_guard lock(mutex);
          failures.push_back(why);
        }
      }
    });
    INFO("group of " << size);
    CHECK(failures.size() == 0);
    for (size_t i = 0; i < std::min<size_t>(failures.size(), 10); ++i) FAIL_CHECK(failures[i]);
  }
}

TEST_CASE("shm: random fp32 allreduce folds in rank order") {
  // The backend adds slots in rank order (left fold), on every rank and code path, so the
  // result is bit-identical to that serial fold. Against the exact (double) sum it is off by at
  // most the classic bound for n-1 additions: (n-1) * eps/2 * sum|x|, to first order.
  constexpr int kSize = 4;
  constexpr size_t kCount = 300001;
  std::vector<std::vector<float>> inputs(kSize, std::vector<float>(kCount));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& v : inputs)
    for (auto& x : v) x = dist(rng);
  std::vector<std::vector<float>> outputs = inputs;
  dscpp::test::run_thread_ranks(kSize, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto backend = make_shm_backend(context(rank, n, store));
    backend->run({OpKind::allreduce, outputs[rank].data(), outputs[rank].data(), kCount, DType::f32});
  });
  size_t not_fold = 0, beyond_bound = 0, differ = 0;
  for (size_t i = 0; i < kCount; ++i) {
    float fold = inputs[0][i];
    double exact = inputs[0][i], magnitude = std::fabs(inputs[0][i]);
    for (int r = 1; r < kSize; ++r) fold += inputs[r][i], exact += inputs[r][i], magnitude += std::fabs(inputs[r][i]);
    const float got = outputs[0][i];
    not_fold += std::memcmp(&got, &fold, sizeof got) != 0;
    beyond_bound += std::fabs(got - exact) > (kSize - 1) * 0.5 * FLT_EPSILON * magnitude * 1.0001;
    for (int r = 1; r < kSize; ++r) differ += std::memcmp(&outputs[r][i], &got, sizeof got) != 0;
  }
  CHECK(not_fold == 0);
  CHECK(beyond_bound == 0);
  CHECK(differ == 0);
}

TEST_CASE("shm: AVX2 kernels match the scalar ones bit for bit") {
  if (!shm::cpu_has_avx2()) return;
  std::mt19937 rng(7);
  constexpr size_t kN = 4099;
  constexpr int kSlots = 11;  // more than the 8 the loads of one pass could keep in registers
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const size_t e = dtype_size(t);
    std::vector<std::vector<unsigned char>> slots(kSlots, std::vector<unsigned char>(kN * e));
    for (auto& s : slots)
      for (size_t i = 0; i < kN; ++i) {
        // Random bit patterns hit NaN, Inf, subnormals and overflow to Inf; a third are
        // ordinary small values so that sums stay finite and rounding gets exercised.
        const uint32_t bits = rng();
        if (i % 3 == 0)
          put(t, s.data(), i, std::ldexp(double(int32_t(bits) >> 8), -20));
        else
          std::memcpy(s.data() + i * e, &bits, e);
      }
    for (ReduceOp op : kOps)
      for (int nsrc : {1, 2, 3, 8, kSlots}) {
        const void* srcs[kSlots];
        for (int j = 0; j < nsrc; ++j) srcs[j] = slots[j].data();
        std::vector<unsigned char> scalar(kN * e), simd(kN * e);
        shm::reduce(t, op, scalar.data(), srcs, nsrc, kN, nsrc, false);
        std::vector<unsigned char> copy(kN * e);
        shm::reduce(t, op, simd.data(), srcs, nsrc, kN, nsrc, true, copy.data());
        CHECK(copy == simd);
        size_t mismatches = 0;
        for (size_t i = 0; i < kN; ++i) {
          const double a = get(t, scalar.data(), i), b = get(t, simd.data(), i);
          // When several NaNs meet in one sum, IEEE leaves open which payload survives.
          if (std::isnan(a) && std::isnan(b) && (op == ReduceOp::sum || op == ReduceOp::avg)) continue;
          mismatches += std::memcmp(scalar.data() + i * e, simd.data() + i * e, e) != 0;
        }
        INFO(dtype_name(t) << " op " << int(op) << " over " << nsrc << " slots");
        CHECK(mismatches == 0);
      }
  }
}

TEST_CASE("shm: in-place allgather, supports(), segment name unlinked after setup") {
  constexpr size_t kCount = 100003;
  dscpp::test::run_thread_ranks(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto backend = make_shm_backend(context(rank, n, store));
    const std::string name = store->get("g/shm/name", Millis(1000));
    if (name.empty() || std::filesystem::exists("/dev/shm" + name))
      throw std::runtime_error("segment " + name + " still exists after setup");
    for (DType t : kTypes)
      for (ReduceOp op : kOps)
        if (!backend->supports(t, op)) throw std::runtime_error("shm reduces every dtype natively");
    std::vector<int32_t> buf(n * kCount, -1);
    for (size_t i = 0; i < kCount; ++i) buf[rank * kCount + i] = int32_t(rank * 1000000 + i);
    backend->run({OpKind::allgather, buf.data() + rank * kCount, buf.data(), kCount, DType::i32});
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < kCount; ++i)
        if (buf[r * kCount + i] != int32_t(r * 1000000 + i)) throw std::runtime_error("in-place allgather is wrong");
  });
}

TEST_CASE("shm: split into two sub-groups") {
  dscpp::test::run_thread_ranks(4, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto parent = make_shm_backend(context(rank, n, store));
    // Ranks 0, 2 and 1, 3 form "even" and "odd"; a fifth plan with color -1 joins nothing.
    SplitPlan plan;
    plan.color = rank % 2;
    plan.members = {plan.color, plan.color + 2};
    plan.context = context(rank / 2, 2, store, Millis(20000), fmt::format("split{}", plan.color));
    plan.context.name = plan.color == 0 ? "even" : "odd";
    auto sub = parent->split(plan);
    if (!sub || sub->rank() != rank / 2 || sub->size() != 2) throw std::runtime_error("bad sub-group");
    std::vector<int64_t> v(5000, rank + 1);
    sub->run({OpKind::allreduce, v.data(), v.data(), v.size(), DType::i64});
    const int64_t want = plan.color == 0 ? 1 + 3 : 2 + 4;
    for (auto x : v)
      if (x != want) throw std::runtime_error(fmt::format("rank {}: sub-group sum {} != {}", rank, x, want));
    // The parent is still usable next to its sub-groups.
    std::vector<float> w(10, 1.f);
    parent->run({OpKind::allreduce, w.data(), w.data(), w.size(), DType::f32});
    if (w[9] != 4.f) throw std::runtime_error("parent allreduce after split is wrong");
    SplitPlan none;
    none.color = -1;
    if (parent->split(none) != nullptr) throw std::runtime_error("color < 0 must give nullptr");
  });
}

namespace {

// Runs `size` ranks where `victim` misbehaves via `victim_body`; returns each rank's error.
template <typename F>
std::vector<std::string> errors_with_victim(int size, int victim, F victim_body, Millis timeout, double* seconds) {
  std::vector<std::string> errors(size);
  std::atomic<int> done{0};
  const auto start = Clock::now();
  dscpp::test::run_thread_ranks(size, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto backend = make_shm_backend(context(rank, n, store, timeout));
    std::vector<float> v(1000, 1.f);
    backend->run({OpKind::allreduce, v.data(), v.data(), v.size(), DType::f32});  // all fine once
    if (rank == victim) {
      victim_body(backend, done, n);
      return;
    }
    try {
      backend->run({OpKind::allreduce, v.data(), v.data(), v.size(), DType::f32});
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
    try {
      backend->run({OpKind::barrier});
    } catch (const Error& e) {
      errors[rank] += std::string(" | ") + e.what();
    }
    ++done;
  });
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return errors;
}

}  // namespace

TEST_CASE("shm: a rank that stops participating fails the others within the timeout") {
  double seconds = 0;
  auto errors = errors_with_victim(
      3, 2,
      [](std::unique_ptr<Backend>&, std::atomic<int>& done, int n) {
        while (done.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      },
      Millis(500), &seconds);
  for (int r : {0, 1}) {
    INFO(errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("shm group 'world': rank 2 did not reach allreduce within 0.5 s"));
    CHECK_THAT(errors[r], Catch::Contains("unusable after an earlier failure"));
  }
  CHECK(seconds < 5);
}

TEST_CASE("shm: a rank that closes its backend fails the others at once") {
  double seconds = 0;
  auto errors = errors_with_victim(
      2, 1, [](std::unique_ptr<Backend>& b, std::atomic<int>&, int) { b.reset(); }, Millis(20000), &seconds);
  INFO(errors[0]);
  CHECK_THAT(errors[0], Catch::Contains("rank 1 (pid"));
  CHECK_THAT(errors[0], Catch::Contains("closed its shm backend before allreduce"));
  CHECK(seconds < 5);
}

TEST_CASE("shm: ranks issuing different collectives fail instead of mixing data") {
  std::vector<std::string> errors(2);
  dscpp::test::run_thread_ranks(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto backend = make_shm_backend(context(rank, n, store, Millis(5000)));
    std::vector<float> in(8, 1.f), out(16);
    try {
      if (rank == 0)
        backend->run({OpKind::allreduce, in.data(), in.data(), 8, DType::f32});
      else
        backend->run({OpKind::allgather, in.data(), out.data(), 8, DType::f32});
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("collective #1 differs between ranks"));
}

namespace {

// A store two processes share through files, because MemoryStore cannot cross fork().
class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, std::string_view value) override {
    const auto path = file(key), tmp = path + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp) << value;
    std::filesystem::rename(tmp, path);
  }
  std::string get(const std::string& key, Millis timeout) override {
    if (!wait({key}, timeout).empty()) throw StoreTimeout("file store: no " + key, {key});
    std::ifstream f(file(key));
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  int64_t add(const std::string&, int64_t) override { throw Error("file store: add is not needed here"); }
  std::vector<std::string> wait(const std::vector<std::string>& keys, Millis timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!check(k)) missing.push_back(k);
      if (missing.empty() || Clock::now() >= deadline) return missing;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bool check(const std::string& key) override { return std::filesystem::exists(file(key)); }
  void erase(const std::string& key) override { std::filesystem::remove(file(key)); }

 private:
  std::string file(std::string key) const {
    for (auto& c : key)
      if (c == '/') c = '_';
    return dir_ + "/" + key;
  }
  std::string dir_;
};

}  // namespace

TEST_CASE("shm: a crashed process is reported within about 100 ms") {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("dscpp-shm-test-{}", getpid());
  std::filesystem::create_directories(dir);
  auto store = std::make_shared<FileStore>(dir.string());
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Rank 1: one good collective, then "crash": exit without closing the backend.
    int status = 1;
    try {
      auto backend = make_shm_backend(context(1, 2, store, Millis(10000)));
      std::vector<double> v(100, 2.0);
      backend->run({OpKind::allreduce, v.data(), v.data(), v.size(), DType::f64});
      status = v[99] == 3.0 ? 0 : 2;
      backend.release();  // NOLINT: deliberately leaked, as a crash would
    } catch (...) {
    }
    _exit(status);
  }
  std::string error;
  double seconds = 0;
  {
    auto backend = make_shm_backend(context(0, 2, store, Millis(10000)));
    std::vector<double> v(100, 1.0);
    backend->run({OpKind::allreduce, v.data(), v.data(), v.size(), DType::f64});
    CHECK(v[0] == 3.0);
    const auto start = Clock::now();
    try {
      backend->run({OpKind::allreduce, v.data(), v.data(), v.size(), DType::f64});
    } catch (const Error& e) {
      error = e.what();
    }
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  int status = -1;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(error == fmt::format("shm group 'world': rank 1 (pid {}) exited during allreduce", child));
  CHECK(seconds < 2);
}
