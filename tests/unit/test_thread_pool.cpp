// The CPU kernels' thread pool: every index visited exactly once, alignment of chunk starts,
// exceptions propagate, nested calls do not deadlock, thread count changes take effect.
#include "core/thread_pool.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

using dscpp::parallel_for;

TEST_CASE("parallel_for covers every index once for many sizes and thread counts") {
  for (int threads : {1, 2, 3, 5}) {
    dscpp::set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<size_t>(i)] == 1);
    }
  }
  dscpp::set_num_threads(2);
}

TEST_CASE("chunks start on multiples of align and small loops stay on the caller") {
  dscpp::set_num_threads(4);
  std::atomic<int> chunks{0};
  parallel_for(1000, 1, [&](int64_t b, int64_t) {
    CHECK(b % 16 == 0);
    chunks++;
  }, 16);
  CHECK(chunks == 4);
  chunks = 0;
  parallel_for(1000, 100000, [&](int64_t b, int64_t e) {
    CHECK(b == 0);
    CHECK(e == 1000);
    chunks++;
  });
  CHECK(chunks == 1);
  dscpp::set_num_threads(2);
}

TEST_CASE("an exception in a chunk reaches the caller and the pool keeps working") {
  dscpp::set_num_threads(3);
  REQUIRE_THROWS_WITH(parallel_for(300, 1, [](int64_t b, int64_t) {
    if (b > 0) throw std::runtime_error("chunk failed");
  }), "chunk failed");
  std::atomic<int64_t> sum{0};
  parallel_for(300, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  CHECK(sum == 300);
  // Nested use runs serially instead of deadlocking.
  std::atomic<int64_t> inner{0};
  parallel_for(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel_for(10, 1, [&](int64_t x, int64_t y) { inner += y - x; });
  });
  CHECK(inner == 40);
  dscpp::set_num_threads(2);
}
