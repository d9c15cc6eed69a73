// The schedule check (collectives/schedule_check.h): the verdict on hand-made signatures, and
// ranks as threads over the real shm, gloo and hierarchical engines — identical schedules pass
// with the same results as unchecked ones; a different op kind, dtype, count or label at op k,
// a skipped op met by a checkpoint, or a stray split fails every rank within a second with one
// message; with checking off schedule_checkpoint() does nothing.
//
// Catch2's assertions are not thread-safe: rank threads record, the test thread checks.
#include "build_config.h"
#include "collectives/communicator.h"
#include "collectives/schedule_check.h"
#include "tests/collectives/matrix.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

using namespace dscpp;
using namespace dscpp::comm;

namespace {

using Clock = std::chrono::steady_clock;

// ---- signatures made by independent ScheduleChecks, one per simulated rank ----

OpDesc op(OpKind kind, size_t count, DType dtype = DType::f32, ReduceOp reduce = ReduceOp::sum, int root = 0) {
  return {kind, nullptr, nullptr, count, dtype, reduce, root};
}

struct FakeRanks {
  explicit FakeRanks(int n) {
    for (int r = 0; r < n; ++r) checks.emplace_back("world", n);
  }
  // Every rank signs the same operation.
  void all(const OpDesc& o) {
    ++seq;
    for (auto& c : checks) c.sign_op(o, seq);
  }
  void all_checkpoint(std::string_view label) {
    for (auto& c : checks) c.sign_checkpoint(label, seq + 1);
  }
  std::vector<ScheduleCheck> checks;
  uint64_t seq = 0;
};

// ---- communicators over real engines ----

// Forwards to a real engine and counts the schedule exchanges, so a test can tell that the
// check ran (or did not) rather than infer it from the absence of an error.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool supports(DType t, ReduceOp op) const override { return inner_->supports(t, op); }
  void run(const OpDesc& op) override { inner_->run(op); }
  void allgather_host(const void* in, void* out, size_t bytes) override {
    ++*exchanges;
    inner_->allgather_host(in, out, bytes);
  }
  std::unique_ptr<Backend> split(const SplitPlan& plan) override { return inner_->split(plan); }
  std::shared_ptr<int> exchanges = std::make_shared<int>(0);

 private:
  std::unique_ptr<Backend> inner_;
};

enum class Engine { shm, gloo, hierarchical };
const char* engine_name(Engine e) {
  return e == Engine::shm ? "shm" : e == Engine::gloo ? "gloo" : "hierarchical";
}

std::vector<Engine> engines() {
  return DSCPP_HAVE_GLOO ? std::vector<Engine>{Engine::shm, Engine::gloo} : std::vector<Engine>{Engine::shm};
}


struct Checked {
  std::unique_ptr<Communicator> comm;
  std::shared_ptr<int> exchanges;
};

// Hierarchical: 2 "hosts" of size/2 ranks, shm inside, gloo across and flat.
Checked make_comm(Engine engine, int rank, int size, const std::shared_ptr<Store>& store,
                  Millis timeout = std::chrono::seconds(20)) {
  auto world = test::group_context(store, "world", rank, size, timeout);
  std::unique_ptr<Backend> backend;
  if (engine == Engine::shm) {
    backend = make_shm_backend(world);
  } else if (engine == Engine::gloo) {
    backend = make_gloo_backend(world);
  } else {
    int per_host = size / 2;
    Hierarchy h{rank / per_host, 2, rank % per_host, per_host, {}};
    h.global_rank.resize(static_cast<size_t>(size));
    std::iota(h.global_rank.begin(), h.global_rank.end(), 0);
    auto local =
        make_shm_backend(test::group_context(store, fmt::format("node{}", h.node), h.local, per_host, timeout));
    auto cross = make_gloo_backend(test::group_context(store, fmt::format("cross{}", h.local), h.node, 2, timeout));
    auto flat = make_gloo_backend(test::group_context(store, "flat", rank, size, timeout));
    backend = make_hierarchical_backend(world, h, std::move(local), std::move(cross), std::move(flat));
  }
  auto counting = std::make_unique<CountingBackend>(std::move(backend));
  auto exchanges = counting->exchanges;
  return {std::make_unique<Communicator>(world, std::move(counting)), exchanges};
}

// "ranks 0, 1" / "rank 0": every rank but the last.
std::string all_but_last(int n) {
  std::vector<int> ranks(static_cast<size_t>(n - 1));
  std::iota(ranks.begin(), ranks.end(), 0);
  return (n == 2 ? "rank " : "ranks ") + format_rank_list(ranks);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Outcome {
  std::string error;    // from the diverging call
  double seconds = -1;  // how long that call took to fail
  std::string later;    // from an operation issued after it
};

// Two agreeing allreduces, then `diverge(comm, odd)` with odd = the last rank, then one more
// allreduce. Every rank's outcome is returned.
template <typename F>
std::vector<Outcome> run_divergence(Engine engine, int n, F diverge) {
  std::vector<Outcome> out(static_cast<size_t>(n));
  test::run_thread_ranks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto [comm, exchanges] = make_comm(engine, rank, size, store);
    comm->set_schedule_check(true);
    std::vector<float> x(16, 1.0f);
    comm->allreduce(x.data(), 16, DType::f32);
    comm->allreduce(x.data(), 16, DType::f32);
    auto start = Clock::now();
    Outcome& mine = out[static_cast<size_t>(rank)];
    try {
      diverge(*comm, rank == size - 1);
    } catch (const Error& e) {
      mine.error = e.what();
      mine.seconds = seconds_since(start);
    }
    try {
      comm->allreduce(x.data(), 16, DType::f32);
    } catch (const Error& e) {
      mine.later = e.what();
    }
  });
  return out;
}

// Every rank failed within a second with exactly `expected`, and so did its next operation.
void check_all_failed(const std::vector<Outcome>& out, const std::string& expected) {
  for (size_t r = 0; r < out.size(); ++r) {
    INFO("rank " << r);
    CHECK(out[r].error == expected);
    CHECK(out[r].seconds >= 0);
    CHECK(out[r].seconds < 1.0);  // the group timeout is 20 s: no waiting for it
    CHECK(out[r].later == expected);
  }
}

}  // namespace

TEST_CASE("schedule check: the verdict on gathered signatures names the first difference") {
  SECTION("identical signatures agree") {
    FakeRanks ranks(3);
    ranks.all(op(OpKind::allreduce, 8));
    ScheduleEntry e = ranks.checks[0].sign_op(op(OpKind::allgather, 4096, DType::bf16), 2);
    std::vector<ScheduleSignature> all(3, e.signature);
    for (int r = 1; r < 3; ++r) all[r] = ranks.checks[r].sign_op(op(OpKind::allgather, 4096, DType::bf16), 2).signature;
    CHECK(describe_divergence("world", all, e).empty());
  }
  SECTION("three kinds of disagreement, one of them a rank that ended its step") {
    FakeRanks ranks(4);
    for (int i = 0; i < 16; ++i) ranks.all(op(OpKind::allreduce, 100));
    std::vector<ScheduleSignature> all(4);
    ScheduleEntry mine = ranks.checks[0].sign_op(op(OpKind::allgather, 4096, DType::bf16), 17);
    all[0] = mine.signature;
    all[2] = ranks.checks[2].sign_op(op(OpKind::allgather, 4096, DType::bf16), 17).signature;
    all[1] = ranks.checks[1].sign_op(op(OpKind::reduce_scatter, 8192, DType::f32), 17).signature;
    all[3] = ranks.checks[3].sign_checkpoint("end of step 3", 17).signature;
    CHECK(describe_divergence("world", all, mine) ==
          "--check_schedule: ranks diverged in group 'world' at collective #17: ranks 0, 2 issued allgather(bf16, "
          "4096 elements per rank) but rank 1 issued reduce_scatter(fp32 sum, 8192 elements per rank); rank 3 "
          "reached checkpoint 'end of step 3' after 16 collectives");
  }
  SECTION("after a checkpoint, the position since it is named; labels, roots and reduce ops count") {
    FakeRanks ranks(2);
    for (int i = 0; i < 12; ++i) ranks.all(op(OpKind::allreduce, 100));
    ranks.all_checkpoint("end of step 2");
    for (int i = 0; i < 4; ++i) ranks.all(op(OpKind::barrier, 0));
    ranks.checks[0].set_label("fwd layer 3");
    ranks.checks[1].set_label("bwd layer 3");
    ScheduleEntry a = ranks.checks[0].sign_op(op(OpKind::broadcast, 10, DType::f16, ReduceOp::sum, 0), 17);
    ScheduleEntry b = ranks.checks[1].sign_op(op(OpKind::broadcast, 10, DType::f16, ReduceOp::sum, 1), 17);
    CHECK(describe_divergence("node0", {a.signature, b.signature}, a) ==
          "--check_schedule: ranks diverged in group 'node0' at collective #17 (#5 since checkpoint 'end of step 2'): "
          "rank 0 issued broadcast(fp16, 10 elements, root 0) labelled 'fwd layer 3' but rank 1 issued "
          "broadcast(fp16, 10 elements, root 1) labelled 'bwd layer 3'");
    ranks.checks[1].set_label("fwd layer 3");
    a = ranks.checks[0].sign_op(op(OpKind::allreduce, 10, DType::f32, ReduceOp::max), 18);
    b = ranks.checks[1].sign_op(op(OpKind::allreduce, 10, DType::f32, ReduceOp::min), 18);
    CHECK_THAT(describe_divergence("node0", {a.signature, b.signature}, a),
               Catch::Contains("rank 0 issued allreduce(fp32 max, 10 elements) labelled 'fwd layer 3' but rank 1 "
                               "issued allreduce(fp32 min, 10 elements)"));
  }
  SECTION("fields an operation ignores do not count") {
    FakeRanks ranks(2);
    ScheduleEntry a = ranks.checks[0].sign_op(op(OpKind::allgather, 7, DType::f32, ReduceOp::max, 1), 1);
    ScheduleEntry b = ranks.checks[1].sign_op(op(OpKind::allgather, 7, DType::f32, ReduceOp::sum, 0), 1);
    ScheduleEntry c = ranks.checks[0].sign_op(op(OpKind::barrier, 5, DType::f64), 2);
    ScheduleEntry d = ranks.checks[1].sign_op(op(OpKind::barrier, 0, DType::f32), 2);
    CHECK(describe_divergence("world", {a.signature, b.signature}, a).empty());
    CHECK(describe_divergence("world", {c.signature, d.signature}, c).empty());
  }
  SECTION("same operation after different histories, or at different numbers") {
    FakeRanks ranks(3);
    ranks.checks[2].sign_op(op(OpKind::barrier, 0), 1);  // rank 2 alone had an extra barrier
    std::vector<ScheduleSignature> all;
    for (auto& c : ranks.checks) all.push_back(c.sign_op(op(OpKind::allreduce, 8), 2).signature);
    CHECK(describe_divergence("world", all, {all[0], 1, ""}) ==
          "--check_schedule: ranks diverged in group 'world' at collective #2: every rank issued allreduce(fp32 sum, 8 "
          "elements), but their earlier collectives on the group differed (one history on ranks 0, 1, another on rank "
          "2); schedule checking was turned on at different points");
    all[2] = ranks.checks[2].sign_op(op(OpKind::allreduce, 8), 3).signature;
    CHECK_THAT(describe_divergence("world", all, {all[0], 1, ""}),
               Catch::Contains("at different collective numbers: ranks 0, 1 issued allreduce(fp32 sum, 8 elements) as "
                               "collective #2 but rank 2 issued allreduce(fp32 sum, 8 elements) as collective #3"));
  }
  SECTION("a rank that sent no signature is named as not checking") {
    FakeRanks ranks(2);
    ScheduleEntry a = ranks.checks[0].sign_op(op(OpKind::allreduce, 32), 1);
    ScheduleSignature garbage;
    std::memset(static_cast<void*>(&garbage), 0x3f, sizeof garbage);  // another rank's unrelated bytes
    CHECK(describe_divergence("world", {a.signature, garbage}, a) ==
          "--check_schedule: group 'world' at collective #1: rank 1 sent no schedule signature, so schedule checking "
          "is off there; turn it on for every rank of the group at the same point (DSCPP_CHECK_SCHEDULE=1 on every "
          "rank)");
  }
  SECTION("a long label is cut, and compared cut") {
    FakeRanks ranks(2);
    std::string long_label(200, 'x');
    ranks.checks[0].set_label(long_label);
    ranks.checks[1].set_label(long_label + "tail");
    ScheduleEntry a = ranks.checks[0].sign_op(op(OpKind::barrier, 0), 1);
    ScheduleEntry b = ranks.checks[1].sign_op(op(OpKind::barrier, 0), 1);
    CHECK(describe_divergence("world", {a.signature, b.signature}, a).empty());
    CHECK(describe_signature(a.signature) == "issued barrier labelled '" + std::string(87, 'x') + "'");
  }
}

TEST_CASE("schedule check: identical schedules pass and compute what unchecked ones do") {
  for (Engine engine : engines()) {
    for (int n : {2, 3}) {
      DYNAMIC_SECTION(engine_name(engine) << ", " << n << " ranks") {
        std::vector<size_t> checks(static_cast<size_t>(n));
        // [rank][on]: the step's buffers one after the other, and its counts.
        std::vector<std::vector<float>> results(2 * static_cast<size_t>(n));
        std::vector<int> exchanges(2 * static_cast<size_t>(n)), ops(2 * static_cast<size_t>(n));
        std::vector<int> child_checking(static_cast<size_t>(n));
        test::run_thread_ranks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
          auto [comm, exchanged] = make_comm(engine, rank, size, store);
          // The correctness matrix against its independent reference, checked.
          comm->set_schedule_check(true);
          checks[rank] = test::check_collectives(*comm, {{0, 1, 1000}, {DType::f32, DType::bf16}, true});
          if (*exchanged != static_cast<int>(comm->stats().ops)) throw Error("not every operation was checked");
          // One small step, checked then unchecked, on the same communicator.
          for (int on : {1, 0}) {
            comm->set_schedule_check(on);
            uint64_t ops_before = comm->stats().ops;
            int exchanges_before = *exchanged;
            std::vector<float> a(6), b(6), gathered(6 * size), scattered(6);
            for (size_t i = 0; i < 6; ++i) a[i] = static_cast<float>(rank * 10 + i);
            for (size_t i = 0; i < 6; ++i) b[i] = static_cast<float>(rank * 100 + i);
            comm->set_schedule_label("step");
            comm->allreduce(a.data(), 6, DType::f32);
            comm->schedule_checkpoint("after the allreduce");
            auto h = comm->allgather_async(a.data(), gathered.data(), 6, DType::f32);
            comm->broadcast(b.data(), 6, DType::f32, size - 1);
            h->wait();
            comm->reduce_scatter(gathered.data(), scattered.data(), 6, DType::f32);
            comm->barrier();
            comm->schedule_checkpoint("end of step");
            auto& res = results[static_cast<size_t>(rank * 2 + on)];
            for (const auto* v : {&a, &b, &gathered, &scattered}) res.insert(res.end(), v->begin(), v->end());
            exchanges[rank * 2 + on] = *exchanged - exchanges_before;
            ops[rank * 2 + on] = static_cast<int>(comm->stats().ops - ops_before);
          }
          comm->set_schedule_check(true);
          auto child = comm->split(rank % 2, rank, "parity");
          child_checking[rank] = child->schedule_check();
          float one = 1;
          child->allreduce(&one, 1, DType::f32);
          if (one != static_cast<float>(child->size())) throw Error("split child allreduce gave a wrong sum");
        });
        // Closed forms: a = sum over ranks of rank*10+i; b = rank n-1's; every slice of gathered
        // is a; scattered sums rank r's slice of gathered over the n ranks.
        std::vector<float> expected;
        for (size_t i = 0; i < 6; ++i) expected.push_back(10.0f * n * (n - 1) / 2 + static_cast<float>(n * i));
        std::vector<float> a = expected;
        for (size_t i = 0; i < 6; ++i) expected.push_back(static_cast<float>((n - 1) * 100 + i));
        for (int r = 0; r < n; ++r) expected.insert(expected.end(), a.begin(), a.end());
        for (size_t i = 0; i < 6; ++i) expected.push_back(static_cast<float>(n) * a[i]);
        for (int r = 0; r < n; ++r) {
          INFO("rank " << r);
          CHECK(checks[r] > 40);                  // the matrix ran (79 checks when written)
          CHECK(results[r * 2 + 1] == expected);  // checked
          CHECK(results[r * 2] == expected);      // unchecked
          CHECK(ops[r * 2 + 1] == 5);
          CHECK(ops[r * 2] == 5);            // the exchanges are not counted as operations
          CHECK(exchanges[r * 2 + 1] == 7);  // 5 operations + 2 checkpoints
          CHECK(exchanges[r * 2] == 0);
          CHECK(child_checking[r] == 1);
        }
      }
    }
  }
}

TEST_CASE("schedule check: a different kind, dtype, count or label at op 3 fails every rank at once") {
  for (Engine engine : engines()) {
    for (int n : {2, 3}) {
      DYNAMIC_SECTION(engine_name(engine) << ", " << n << " ranks") {
        const std::string head =
            "--check_schedule: ranks diverged in group 'world' at collective #3: " + all_but_last(n) +
            " issued allgather(bf16, 4096 elements per rank) but rank " + std::to_string(n - 1) + " issued ";
        check_all_failed(run_divergence(engine, n,
                                        [&](Communicator& c, bool odd) {
                                          std::vector<uint16_t> i(4096 * 3), o(4096 * 3);
                                          if (odd)
                                            c.reduce_scatter(i.data(), o.data(), 4096, DType::bf16);
                                          else
                                            c.allgather(i.data(), o.data(), 4096, DType::bf16);
                                        }),
                         head + "reduce_scatter(bf16 sum, 4096 elements per rank)");
        check_all_failed(run_divergence(engine, n,
                                        [&](Communicator& c, bool odd) {
                                          std::vector<float> i(4096), o(4096 * 3);
                                          c.allgather(i.data(), o.data(), 4096, odd ? DType::f32 : DType::bf16);
                                        }),
                         head + "allgather(fp32, 4096 elements per rank)");
        check_all_failed(run_divergence(engine, n,
                                        [&](Communicator& c, bool odd) {
                                          std::vector<uint16_t> i(4097), o(4097 * 3);
                                          c.allgather(i.data(), o.data(), odd ? 4097 : 4096, DType::bf16);
                                        }),
                         head + "allgather(bf16, 4097 elements per rank)");
        check_all_failed(run_divergence(engine, n,
                                        [&](Communicator& c, bool odd) {
                                          std::vector<uint16_t> i(4096), o(4096 * 3);
                                          if (odd) c.set_schedule_label("backward");
                                          c.allgather(i.data(), o.data(), 4096, DType::bf16);
                                        }),
                         head + "allgather(bf16, 4096 elements per rank) labelled 'backward'");
      }
    }
  }
}

TEST_CASE("schedule check: a rank that skips an op and ends its step is matched against the op") {
  for (Engine engine : engines()) {
    for (int n : {2, 3}) {
      DYNAMIC_SECTION(engine_name(engine) << ", " << n << " ranks") {
        // Step 0 agrees; in step 1 the last rank skips the allgather.
        auto out = run_divergence(engine, n, [](Communicator& c, bool odd) {
          std::vector<float> x(16), y(16 * 3);
          c.schedule_checkpoint("end of step 0");
          c.allreduce(x.data(), 16, DType::f32);
          if (!odd) c.allgather(x.data(), y.data(), 16, DType::f32);
          c.schedule_checkpoint("end of step 1");
        });
        check_all_failed(out,
                         "--check_schedule: ranks diverged in group 'world' at collective #4 (#2 since checkpoint "
                         "'end of step 0'): " +
                             all_but_last(n) + " issued allgather(fp32, 16 elements per rank) but rank " +
                             std::to_string(n - 1) + " reached checkpoint 'end of step 1' after 3 collectives");
      }
    }
  }
}

TEST_CASE("schedule check: a rank that splits while the others reduce fails at once, not at the store timeout") {
  auto out = run_divergence(Engine::shm, 3, [](Communicator& c, bool odd) {
    float x = 1;
    if (odd)
      c.split(0, 0, "stray");
    else
      c.allreduce(&x, 1, DType::f32);
  });
  check_all_failed(out,
                   "--check_schedule: ranks diverged in group 'world' at collective #3: ranks 0, 1 issued "
                   "allreduce(fp32 sum, 1 element) but rank 2 called split");
}

TEST_CASE("schedule check: the hierarchical engine (shm inside hosts, gloo across) passes and catches") {
  if (!DSCPP_HAVE_GLOO) return;
  std::vector<size_t> checks(4);
  test::run_thread_ranks(4, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto [comm, exchanged] = make_comm(Engine::hierarchical, rank, size, store);
    comm->set_schedule_check(true);
    checks[rank] = test::check_collectives(*comm, {{1, 1000}, {DType::f32, DType::bf16}, false});
    if (*exchanged != static_cast<int>(comm->stats().ops)) throw Error("not every operation was checked");
  });
  for (size_t c : checks) CHECK(c > 25);  // the matrix ran (50 checks when written)
  auto out = run_divergence(Engine::hierarchical, 4, [](Communicator& c, bool odd) {
    std::vector<float> x(64);
    c.allreduce(x.data(), odd ? 32 : 64, DType::f32);
  });
  check_all_failed(out,
                   "--check_schedule: ranks diverged in group 'world' at collective #3: ranks 0-2 issued "
                   "allreduce(fp32 sum, 64 elements) but rank 3 issued allreduce(fp32 sum, 32 elements)");
}

TEST_CASE("schedule check: a rank that issues nothing more is left to the timeout, whose report names the checkpoint") {
  std::vector<std::string> errors(3);
  test::run_thread_ranks(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto [comm, exchanged] = make_comm(Engine::shm, rank, n, store, Millis(800));
    comm->set_schedule_check(true);
    float x = 1;
    comm->allreduce(&x, 1, DType::f32);
    comm->allreduce(&x, 1, DType::f32);
    if (rank == 2) {
      // Busy elsewhere, communicator open, long enough for the others to give up and ask.
      std::this_thread::sleep_for(std::chrono::milliseconds(4000));
      return;
    }
    try {
      comm->schedule_checkpoint("end of step 1");
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (int r : {0, 1}) {
    INFO(errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("group 'world' (shm): schedule checkpoint 'end of step 1' (before operation "
                                          "#3) did not complete within"));
    CHECK_THAT(errors[r], Catch::Contains("Behind: rank 2 had finished at least #2 (allreduce)"));
  }
}

TEST_CASE("schedule check off: schedule_checkpoint does nothing") {
  for (Engine engine : engines()) {
    for (int n : {2, 3}) {
      DYNAMIC_SECTION(engine_name(engine) << ", " << n << " ranks") {
        std::vector<float> sums(static_cast<size_t>(n));
        std::vector<int> exchanges(static_cast<size_t>(n)), ops(static_cast<size_t>(n));
        test::run_thread_ranks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
          // A short timeout: were the checkpoint to exchange anything, rank 0's exchange would
          // meet the others' allreduce and fail (or hang) instead of summing.
          auto [comm, exchanged] = make_comm(engine, rank, size, store, Millis(3000));
          if (rank == 0)
            for (int i = 0; i < 3; ++i) comm->schedule_checkpoint("only rank 0 says this");
          float x = static_cast<float>(rank + 1);
          comm->allreduce(&x, 1, DType::f32);
          sums[rank] = x;
          exchanges[rank] = *exchanged;
          ops[rank] = static_cast<int>(comm->stats().ops);
        });
        for (int r = 0; r < n; ++r) {
          CHECK(sums[r] == static_cast<float>(n * (n + 1) / 2));
          CHECK(exchanges[r] == 0);
          CHECK(ops[r] == 1);
        }
      }
    }
  }
}

TEST_CASE("schedule check: DSCPP_CHECK_SCHEDULE reaches every group create_world makes") {
  unsetenv("DSCPP_CHECK_SCHEDULE");
  CHECK_FALSE(comm_options_from_env().check_schedule);
  setenv("DSCPP_CHECK_SCHEDULE", "maybe", 1);
  CHECK_THROWS_WITH(comm_options_from_env(), Catch::Contains("DSCPP_CHECK_SCHEDULE='maybe': expected 1"));
  setenv("DSCPP_CHECK_SCHEDULE", "1", 1);
  CommOptions o = comm_options_from_env();
  unsetenv("DSCPP_CHECK_SCHEDULE");
  REQUIRE(o.check_schedule);
  o.rank = 0;
  o.world_size = 1;
  World w = create_world(o);
  CHECK(w.world->schedule_check());
  CHECK(w.node->schedule_check());
  CHECK(w.cross->schedule_check());
  CHECK_THAT(w.description, Catch::EndsWith("schedule check on"));
  w.world->schedule_checkpoint("one rank: nothing to compare");
  float x = 3;
  w.world->allreduce(&x, 1, DType::f32);
  CHECK(x == 3.0f);
  o.check_schedule = false;
  World off = create_world(o);
  CHECK_FALSE(off.world->schedule_check());
}
