// The gloo backend called directly, ranks as threads over a MemoryStore: every op against a
// serial reference computed here, sub-groups, and peers that stop answering.
//
// Catch2's assertions are not thread-safe, so rank threads throw on a mismatch and the test
// thread checks that run_thread_ranks() returned cleanly.
#include "build_config.h"
#include "collectives/backend.h"
#include "tests/unit/thread_ranks.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace dscpp;
using namespace dscpp::comm;

namespace {

GroupContext make_context(int rank, int size, std::shared_ptr<Store> store, Millis timeout = Millis(20000)) {
  GroupContext context;
  context.store = std::move(store);
  context.rank = rank;
  context.size = size;
  context.timeout = timeout;
  return context;
}

}  // namespace

#if DSCPP_HAVE_GLOO

namespace {

// A macro so the message is only formatted when the check fails (checks run per element).
#define EXPECT(ok, ...)                                            \
  do {                                                             \
    if (!(ok)) throw std::runtime_error(fmt::format(__VA_ARGS__)); \
  } while (0)

const size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 18) + 3};

// Integer-valued, so every order of summation is exact in every dtype tested.
double value(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + size_t(rank) * 13) % 17) - 8);
}

template <typename T>
T reference(ReduceOp op, int size, size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    double v = value(r, i);
    acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : std::min(acc, v);
  }
  return static_cast<T>(acc);
}

template <typename T>
void check_reductions(Backend& backend, DType dtype) {
  const int rank = backend.rank(), size = backend.size();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    EXPECT(backend.supports(dtype, op), "supports() refuses a native reduction");
    for (size_t count : kCounts) {
      if (count > 1000 && op != ReduceOp::sum) continue;  // the big size once per dtype is enough
      std::vector<T> buffer(count);
      for (size_t i = 0; i < count; ++i) buffer[i] = static_cast<T>(value(rank, i));
      backend.run({OpKind::allreduce, buffer.data(), buffer.data(), count, dtype, op});
      for (size_t i = 0; i < count; ++i)
        EXPECT(buffer[i] == reference<T>(op, size, i),
               "allreduce {} {} count {} size {}: element {} is {}, expected {}", dtype_name(dtype), reduce_op_name(op),
               count, size, i, double(buffer[i]), double(reference<T>(op, size, i)));

      std::vector<T> input(count * size), output(count, T(-99));
      for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<T>(value(rank, i));
      const std::vector<T> before = input;
      backend.run({OpKind::reduce_scatter, input.data(), output.data(), count, dtype, op});
      EXPECT(input == before, "reduce_scatter modified its input");
      for (size_t i = 0; i < count; ++i)
        EXPECT(output[i] == reference<T>(op, size, rank * count + i),
               "reduce_scatter {} {} count {} size {} rank {}: element {} is {}, expected {}", dtype_name(dtype),
               reduce_op_name(op), count, size, rank, i, double(output[i]),
               double(reference<T>(op, size, rank * count + i)));
    }
  }
  EXPECT(!backend.supports(dtype, ReduceOp::avg), "avg must be staged by the Communicator");
}

uint8_t pattern(int rank, size_t i, int salt) {
  return static_cast<uint8_t>(i * 7 + size_t(rank) * 101 + size_t(salt) * 31);
}

void check_movement(Backend& backend, DType dtype) {
  const int rank = backend.rank(), size = backend.size();
  const size_t es = dtype_size(dtype);
  for (size_t count : kCounts) {
    // Byte-wise checks of megabytes are slow under ASan; the big size once per width is enough.
    if (count > 1000 && dtype != DType::f32 && dtype != DType::f16) continue;
    const size_t bytes = count * es;
    const std::string what = fmt::format("{} count {} size {} rank {}", dtype_name(dtype), count, size, rank);

    std::vector<uint8_t> in(bytes), out(bytes * size, 0xEE);
    for (size_t i = 0; i < bytes; ++i) in[i] = pattern(rank, i, 1);
    backend.run({OpKind::allgather, in.data(), out.data(), count, dtype});
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < bytes; ++i)
        EXPECT(out[r * bytes + i] == pattern(r, i, 1), "allgather {}: slice {} wrong", what, r);

    std::vector<uint8_t> inplace(bytes * size, 0xEE);
    for (size_t i = 0; i < bytes; ++i) inplace[rank * bytes + i] = pattern(rank, i, 2);
    backend.run({OpKind::allgather, inplace.data() + rank * bytes, inplace.data(), count, dtype});
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < bytes; ++i)
        EXPECT(inplace[r * bytes + i] == pattern(r, i, 2), "in-place allgather {}", what);

    const int root = static_cast<int>(count % size);
    std::vector<uint8_t> buffer(bytes, 0xEE);
    if (rank == root)
      for (size_t i = 0; i < bytes; ++i) buffer[i] = pattern(root, i, 3);
    backend.run({OpKind::broadcast, buffer.data(), buffer.data(), count, dtype, ReduceOp::sum, root});
    for (size_t i = 0; i < bytes; ++i) EXPECT(buffer[i] == pattern(root, i, 3), "broadcast {}", what);

    // Slice j of rank r's input is pattern(r * size + j); rank r's output slice i came from rank i.
    std::vector<uint8_t> send(bytes * size), recv(bytes * size, 0xEE);
    for (int j = 0; j < size; ++j)
      for (size_t i = 0; i < bytes; ++i) send[j * bytes + i] = pattern(rank * size + j, i, 4);
    backend.run({OpKind::all_to_all, send.data(), recv.data(), count, dtype});
    for (int from = 0; from < size; ++from)
      for (size_t i = 0; i < bytes; ++i)
        EXPECT(recv[from * bytes + i] == pattern(from * size + rank, i, 4), "all_to_all {}", what);
  }
  backend.run({OpKind::barrier});
}

}  // namespace

TEST_CASE("gloo: every op matches a serial reference on 2, 3 and 4 ranks", "[gloo]") {
  for (int size : {2, 3, 4}) {
    INFO("ranks: " << size);
    REQUIRE_NOTHROW(test::run_thread_ranks(size, [](int rank, int n, std::shared_ptr<Store> store) {
      auto backend = make_gloo_backend(make_context(rank, n, store));
      EXPECT(backend->name() == "gloo" && backend->rank() == rank && backend->size() == n, "identity");
      check_reductions<float>(*backend, DType::f32);
      check_reductions<double>(*backend, DType::f64);
      check_reductions<int32_t>(*backend, DType::i32);
      for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::f16, DType::bf16, DType::u8})
        check_movement(*backend, dtype);
      EXPECT(!backend->supports(DType::f16, ReduceOp::sum) && !backend->supports(DType::bf16, ReduceOp::sum),
             "fp16/bf16 reductions must be staged by the Communicator");
    }));
  }
}

TEST_CASE("gloo: one rank is a group of its own", "[gloo]") {
  auto backend = make_gloo_backend(make_context(0, 1, std::make_shared<MemoryStore>()));
  std::vector<float> in = {1, 2, 3}, out(3);
  backend->run({OpKind::allreduce, in.data(), in.data(), 3, DType::f32});
  backend->run({OpKind::reduce_scatter, in.data(), out.data(), 3, DType::f32});
  CHECK(out == in);
  backend->run({OpKind::all_to_all, in.data(), out.data(), 3, DType::f32});
  CHECK(out == in);
  backend->run({OpKind::barrier});
}

TEST_CASE("gloo: split makes working sub-groups; color -1 gets none", "[gloo]") {
  REQUIRE_NOTHROW(test::run_thread_ranks(4, [](int rank, int n, std::shared_ptr<Store> store) {
    auto world = make_gloo_backend(make_context(rank, n, std::make_shared<PrefixStore>("world", store)));
    // Ranks 0 and 2 form "even", rank 1 stays out, rank 3 is alone in "odd".
    SplitPlan plan;
    plan.color = rank == 1 ? -1 : rank % 2;
    if (plan.color >= 0) {
      plan.members = plan.color == 0 ? std::vector<int>{0, 2} : std::vector<int>{3};
      const int new_rank = plan.color == 0 ? rank / 2 : 0;
      plan.context = make_context(new_rank, int(plan.members.size()),
                                  std::make_shared<PrefixStore>(fmt::format("split/{}", plan.color), store));
      plan.context.name = fmt::format("split{}", plan.color);
    }
    auto sub = world->split(plan);
    EXPECT((sub == nullptr) == (rank == 1), "split returns a group exactly for members");
    if (sub) {
      std::vector<int32_t> buffer(1001, rank + 1);
      sub->run({OpKind::allreduce, buffer.data(), buffer.data(), buffer.size(), DType::i32});
      const int32_t want = plan.color == 0 ? 1 + 3 : 4;
      for (int32_t v : buffer) EXPECT(v == want, "sub-group sum {} != {}", v, want);
    }
    // The parent still works after the split.
    std::vector<double> all(5, 1.0);
    world->run({OpKind::allreduce, all.data(), all.data(), all.size(), DType::f64});
    for (double v : all) EXPECT(v == n, "world allreduce after split");
  }));
}

TEST_CASE("gloo: a silent peer makes the others fail within the timeout, then the group refuses work", "[gloo]") {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors(3), refusals(3);
  test::run_thread_ranks(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto backend = make_gloo_backend(make_context(rank, n, store, Millis(1000)));
    if (rank == 2) {  // alive, connected, but never joins the collective
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    std::vector<float> buffer(1000, 1.0f);
    try {
      backend->run({OpKind::allreduce, buffer.data(), buffer.data(), buffer.size(), DType::f32});
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
    try {
      backend->run({OpKind::barrier});
    } catch (const Error& e) {
      refusals[rank] = e.what();
    }
  });
  for (int rank : {0, 1}) {
    INFO(errors[rank]);
    CHECK_THAT(errors[rank], Catch::Contains("gloo group 'world': allreduce failed on rank"));
    CHECK_THAT(refusals[rank], Catch::Contains("cannot be used again"));
  }
  CHECK_THAT(errors[0], Catch::Contains("nothing from rank 2 within 1.0 s"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(6));
}

TEST_CASE("gloo: a peer that goes away is reported, not waited for", "[gloo]") {
  std::vector<std::string> errors(2);
  const auto start = std::chrono::steady_clock::now();
  test::run_thread_ranks(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto backend = make_gloo_backend(make_context(rank, n, store, Millis(5000)));
    backend->run({OpKind::barrier});
    if (rank == 1) return;  // closes its sockets
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::vector<int64_t> buffer(100000, 1);
    try {
      backend->run({OpKind::allreduce, buffer.data(), buffer.data(), buffer.size(), DType::i64});
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  INFO(errors[0]);
  CHECK_THAT(errors[0],
             Catch::Contains("gloo group 'world': allreduce failed on rank 0 of 2: rank 1 closed the connection"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
}

TEST_CASE("gloo: a rank that never arrives fails the connect, naming it", "[gloo]") {
  std::string error;
  test::run_thread_ranks(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    if (rank == 2) return;
    try {
      auto backend = make_gloo_backend(make_context(rank, n, store, Millis(500)));
    } catch (const Error& e) {
      if (rank == 0) error = e.what();
    }
  });
  CHECK_THAT(error, Catch::Contains("gloo group 'world': rank 2 did not publish a gloo address within 0.5 s"));
}

#else

TEST_CASE("gloo: built without gloo", "[gloo]") {
  WARN("this dscpp was built without gloo: gloo backend tests skipped");
  CHECK_THROWS_WITH(make_gloo_backend(make_context(0, 1, std::make_shared<MemoryStore>())),
                    Catch::Contains("built without gloo"));
}

#endif
