// The Communicator layer (dtype staging, avg, async ordering, sub-groups, hang forensics) and
// the hierarchical composition, over a reference engine that moves every buffer through the
// store and reduces serially in double precision per element. The real engines have their own
// tests (test_comm_shm, test_comm_gloo, tests/system/comm_*).
#include "collectives/comms_logger.h"
#include "collectives/communicator.h"
#include "tests/collectives/matrix.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstring>

using namespace dscpp;
using namespace dscpp::comm;

namespace {

// Reduces f32/f64 sum/max/min only, so that fp16/bf16 staging and avg = sum + scale in the
// Communicator are exercised.
class StoreBackend final : public Backend {
 public:
  explicit StoreBackend(GroupContext c) : c_(std::move(c)) {}
  std::string_view name() const override { return "store"; }
  int rank() const override { return c_.rank; }
  int size() const override { return c_.size; }
  bool supports(DType t, ReduceOp op) const override {
    return (t == DType::f32 || t == DType::f64 || t == DType::i32) && op != ReduceOp::avg;
  }
  void run(const OpDesc& op) override {
    size_t elem = dtype_size(op.dtype);
    size_t in_count = op.count * (op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_to_all ? c_.size : 1);
    std::string tag = fmt::format("op{}", ++ops_);
    c_.store->set(fmt::format("{}/{}", tag, c_.rank),
                  std::string(static_cast<const char*>(op.input ? op.input : ""), op.input ? in_count * elem : 0));
    std::vector<std::string> in;
    for (int r = 0; r < c_.size; ++r) in.push_back(c_.store->get(fmt::format("{}/{}", tag, r), c_.timeout));
    char* out = static_cast<char*>(op.output);
    size_t bytes = op.count * elem;
    switch (op.kind) {
      case OpKind::barrier: return;
      case OpKind::broadcast: std::memcpy(out, in[op.root].data(), bytes); return;
      case OpKind::allgather:
        for (int r = 0; r < c_.size; ++r) std::memcpy(out + r * bytes, in[r].data(), bytes);
        return;
      case OpKind::all_to_all:
        for (int r = 0; r < c_.size; ++r) std::memcpy(out + r * bytes, in[r].data() + c_.rank * bytes, bytes);
        return;
      case OpKind::allreduce: return reduce(op, in, 0, out);
      case OpKind::reduce_scatter: return reduce(op, in, c_.rank * op.count, out);
    }
  }
  std::unique_ptr<Backend> split(const SplitPlan& plan) override {
    return plan.color < 0 ? nullptr : std::make_unique<StoreBackend>(plan.context);
  }

 private:
  void reduce(const OpDesc& op, const std::vector<std::string>& in, size_t offset, char* out) {
    for (size_t i = 0; i < op.count; ++i) {
      double acc = 0;
      for (int r = 0; r < c_.size; ++r) {
        double x = 0;
        const char* p = in[r].data() + (offset + i) * dtype_size(op.dtype);
        if (op.dtype == DType::i32) {
          int32_t v;
          std::memcpy(&v, p, 4);
          x = v;
        } else {
          convert(p, op.dtype, &x, DType::f64, 1);
        }
        acc = r == 0                       ? x
              : op.reduce == ReduceOp::max ? std::max(acc, x)
              : op.reduce == ReduceOp::min ? std::min(acc, x)
                                           : acc + x;
      }
      char* dst = out + i * dtype_size(op.dtype);
      if (op.dtype == DType::i32) {
        int32_t v = static_cast<int32_t>(acc);
        std::memcpy(dst, &v, 4);
      } else {
        convert(&acc, DType::f64, dst, op.dtype, 1);
      }
    }
  }
  GroupContext c_;
  uint64_t ops_ = 0;
};


std::unique_ptr<Communicator> store_comm(const std::shared_ptr<Store>& store, int rank, int size,
                                         Millis timeout = std::chrono::seconds(20)) {
  auto c = test::group_context(store, "world", rank, size, timeout);
  return std::make_unique<Communicator>(c, std::make_unique<StoreBackend>(c));
}

const test::MatrixOptions kSmall{{0, 1, 7, 1000, 4099}, {DType::f32, DType::f16, DType::bf16, DType::f64}, true};

}  // namespace

TEST_CASE("every operation and dtype matches the serial reference on 1-4 ranks") {
  for (int size : {1, 2, 3, 4}) {
    DYNAMIC_SECTION("ranks " << size) {
      test::run_thread_ranks(size, [](int rank, int n, std::shared_ptr<Store> store) {
        auto comm = store_comm(store, rank, n);
        CHECK(test::check_collectives(*comm, kSmall) > 100);
      });
    }
  }
}

TEST_CASE("one rank: create_world needs no store server and every operation is a copy") {
  CommOptions o;
  World w = create_world(o);
  REQUIRE(w.world->size() == 1);
  CHECK(w.world->backend_name() == "self");
  CHECK(test::check_collectives(*w.world, kSmall) > 100);  // copies: the 2^18-element sizes add nothing
  CHECK(w.node->size() == 1);
  CHECK(w.cross->size() == 1);
}

TEST_CASE("the hierarchical composition matches the reference, for block and round-robin placement") {
  // 2 "hosts" x 2 ranks; `table` lists global ranks host by host.
  for (auto table : {std::vector<int>{0, 1, 2, 3}, std::vector<int>{0, 2, 1, 3}}) {
    DYNAMIC_SECTION("placement " << table[1]) {
      test::run_thread_ranks(4, [&](int rank, int n, std::shared_ptr<Store> store) {
        int where = static_cast<int>(std::find(table.begin(), table.end(), rank) - table.begin());
        Hierarchy h{where / 2, 2, where % 2, 2, table};
        auto local = test::group_context(store, fmt::format("node{}", h.node), h.local, 2);
        auto cross = test::group_context(store, fmt::format("cross{}", h.local), h.node, 2);
        auto flat = test::group_context(store, "flat", rank, n);
        auto world = test::group_context(store, "world", rank, n);
        Communicator comm(world, make_hierarchical_backend(world, h, std::make_unique<StoreBackend>(local),
                                                           std::make_unique<StoreBackend>(cross),
                                                           std::make_unique<StoreBackend>(flat)));
        CHECK(test::check_collectives(comm, kSmall) > 100);
      });
    }
  }
}

TEST_CASE("split makes groups by color ordered by key; a negative color joins none") {
  test::run_thread_ranks(4, [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = store_comm(store, rank, n);
    // Reverse order inside each parity group through the key.
    auto half = comm->split(rank % 2, -rank, "parity");
    REQUIRE(half);
    CHECK(half->size() == 2);
    CHECK(half->rank() == (rank < 2 ? 1 : 0));
    float x = static_cast<float>(rank);
    half->allreduce(&x, 1, DType::f32);
    CHECK(x == (rank % 2 == 0 ? 2.0f : 4.0f));
    test::check_collectives(*half, {{1, 1000}, {DType::f32, DType::bf16}, false});
    auto none = comm->split(rank == 3 ? -1 : 0, 0, "not3");
    CHECK((none == nullptr) == (rank == 3));
    if (none) CHECK(none->size() == 3);
  });
}

TEST_CASE("stats count payload and wire bytes with the ring formulas") {
  test::run_thread_ranks(4, [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = store_comm(store, rank, n);
    std::vector<float> buf(1000, 1.0f), out(4000);
    comm->allreduce(buf.data(), 1000, DType::f32);
    comm->allgather(buf.data(), out.data(), 1000, DType::f32);
    CommStats s = comm->stats();
    CHECK(s.ops == 2);
    CHECK(s.payload_bytes == 4000 + 16000);
    CHECK(s.wire_bytes == 6000 + 12000);  // 2(n-1)/n * 4000 + (n-1)/n * 16000
    auto ops = comm->recent_ops();
    REQUIRE(ops.size() == 2);
    CHECK(ops[1].seq == 2);
    CHECK(ops[1].kind == OpKind::allgather);
    CHECK(ops[1].end_s >= ops[1].start_s);
  });
}

TEST_CASE("a rank that falls behind is named with the last operation it finished") {
  std::vector<std::string> errors(4);
  test::run_thread_ranks(4, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = store_comm(store, rank, n, Millis(800));
    float x = 1;
    for (int i = 0; i < 3; ++i) comm->allreduce(&x, 1, DType::f32);
    if (rank == 2) {
      // Stuck outside communication long enough for the others to give up and ask.
      std::this_thread::sleep_for(std::chrono::milliseconds(4000));
      return;
    }
    try {
      comm->allreduce(&x, 1, DType::f32);
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (int r : {0, 1, 3}) {
    INFO(errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("group 'world' (store): "));
    CHECK_THAT(errors[r], Catch::Contains("allreduce #4 (fp32 sum, 0.00 MiB) did not complete within"));
    CHECK_THAT(errors[r], Catch::Contains("Behind: rank 2 had finished at least #3 (allreduce)"));
  }
}

TEST_CASE("a rank that never communicates is named as silent") {
  std::string error;
  test::run_thread_ranks(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = store_comm(store, rank, n, Millis(600));
    if (rank == 1) return;
    float x = 1;
    try {
      comm->allreduce(&x, 1, DType::f32);
    } catch (const Error& e) {
      if (rank == 0) error = e.what();
    }
  });
  CHECK_THAT(error,
             Catch::Contains("Reported no progress on this group (progress is reported once a second: dead, stopped or "
                             "stuck before its first report): rank 1"));
  CHECK_THAT(error, Catch::Contains("Waiting in the same operation: 2"));
}

TEST_CASE("backend names parse, and a wrong one lists the choices") {
  CHECK(parse_backend_choice("auto") == BackendChoice::automatic);
  CHECK(parse_backend_choice("hierarchical") == BackendChoice::hierarchical);
  CHECK_THROWS_WITH(parse_backend_choice("tcp"),
                    Catch::Contains("expected one of auto, shm, gloo, mpi, nccl, hierarchical"));
}

TEST_CASE("settings from the environment are checked and named when wrong") {
  struct Var {
    const char* name;
    const char* value;
    const char* message;
  };
  for (Var v : {Var{"MASTER_PORT", "70000", "MASTER_PORT='70000': expected a TCP port 1-65535"},
                Var{"DSCPP_COMM_TIMEOUT", "abc", "DSCPP_COMM_TIMEOUT='abc': expected seconds > 0"},
                Var{"DSCPP_RANKS_PER_NODE", "1.5", "DSCPP_RANKS_PER_NODE='1.5': expected a whole number of ranks"},
                Var{"DSCPP_COMM_BACKEND", "tcp", "unknown communication backend 'tcp'"}}) {
    setenv(v.name, v.value, 1);
    CHECK_THROWS_WITH(comm_options_from_env(), Catch::Contains(v.message));
    unsetenv(v.name);
  }
  setenv("DSCPP_COMM_TIMEOUT", "2.5", 1);
  setenv("DSCPP_RANKS_PER_NODE", "3", 1);
  CommOptions o = comm_options_from_env();
  CHECK(o.timeout == Millis(2500));
  CHECK(o.ranks_per_node == 3);
  unsetenv("DSCPP_COMM_TIMEOUT");
  unsetenv("DSCPP_RANKS_PER_NODE");
}

TEST_CASE("comms_logger: every finished collective counted by kind and size, bandwidths by the nccl-tests rules") {
  test::run_thread_ranks(4, [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = store_comm(store, rank, n);
    auto all = attach_comms_logger(*comm, {});
    std::vector<float> buf(1000, 1.0f), out(4000);
    for (int i = 0; i < 3; ++i) comm->allreduce(buf.data(), 1000, DType::f32);
    comm->allgather(buf.data(), out.data(), 1000, DType::f32);
    comm->barrier();
    auto rows = all->rows();  // ordered by kind: allreduce, allgather, barrier
    REQUIRE(rows.size() == 3);
    CHECK((rows[0].kind == OpKind::allreduce && rows[0].bytes == 4000 && rows[0].count == 3));
    CHECK((rows[1].kind == OpKind::allgather && rows[1].bytes == 16000 && rows[1].count == 1));
    CHECK((rows[2].kind == OpKind::barrier && rows[2].count == 1));
    CHECK(rows[0].count + rows[1].count + rows[2].count == static_cast<int64_t>(comm->stats().ops));
    // prof_all false: only the listed kinds.
    CommsLoggerOptions only;
    only.prof_all = false;
    only.prof_ops = {OpKind::allgather};
    auto gathers = attach_comms_logger(*comm, only);
    comm->allreduce(buf.data(), 1000, DType::f32);
    comm->allgather(buf.data(), out.data(), 1000, DType::f32);
    rows = gathers->rows();
    REQUIRE(rows.size() == 1);
    CHECK((rows[0].kind == OpKind::allgather && rows[0].count == 1));
    comm->set_op_observer({});
  });
}

TEST_CASE("comms_logger: algbw = bytes / latency, busbw = algbw × the bus factor, DeepSpeed's op names") {
  CHECK(bus_factor(OpKind::allreduce, 4) == 1.5);
  CHECK(bus_factor(OpKind::allgather, 4) == 0.75);
  CHECK(bus_factor(OpKind::broadcast, 4) == 1.0);
  CHECK(bus_factor(OpKind::allreduce, 1) == 0.0);
  CommsLogger log({}, 0, 4);
  OpRecord r;
  r.kind = OpKind::allreduce;
  r.bytes = 1000000000;  // 1 GB in 0.5 s: algbw 2 GB/s, busbw 3 GB/s
  r.start_s = 1.0;
  r.end_s = 1.5;
  log.record(r);
  log.record(r);
  std::string s = log.summary();
  CHECK_THAT(s, Catch::Matchers::Contains("allreduce") && Catch::Matchers::Contains("1000.000") &&
                    Catch::Matchers::Contains("500.000") && Catch::Matchers::Contains("2.000") &&
                    Catch::Matchers::Contains("3.000") && Catch::Matchers::Contains("total: 2 operations"));
  CHECK(comm_op_from_name("all_gather_into_tensor") == OpKind::allgather);
  CHECK(comm_op_from_name("all_to_all_single") == OpKind::all_to_all);
  CHECK_FALSE(comm_op_from_name("all_reduce_coalesced"));
}
