// Runs a function as `size` ranks, one thread each, sharing an in-process store: the fast way
// to test a backend's algorithms (and run them under ASan) without launching processes.
// The first exception thrown by any rank is rethrown on the caller's thread; when several ranks
// throw, the others' messages go to stderr first (the first is often a peer's "rank R closed its
// backend", and rank R's own error is the one that explains the failure).
#pragma once

#include "collectives/backend.h"
#include "collectives/store.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dscpp::test {

template <typename F>
void run_thread_ranks(int size, F&& body) {
  auto store = std::make_shared<comm::MemoryStore>();
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        body(rank, size, std::static_pointer_cast<comm::Store>(store));
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!first) {
          first = std::current_exception();
          return;
        }
        try {
          throw;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "thread rank %d also failed: %s\n", rank, e.what());
        } catch (...) {
          std::fprintf(stderr, "thread rank %d also failed (not a std::exception)\n", rank);
        }
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// A group's context for a thread rank: its own key prefix in the shared store.
inline comm::GroupContext group_context(const std::shared_ptr<comm::Store>& store, const std::string& name, int rank,
                                        int size, comm::Millis timeout = std::chrono::seconds(20)) {
  comm::GroupContext c;
  c.store = std::make_shared<comm::PrefixStore>(name, store);
  c.rank = rank;
  c.size = size;
  c.name = name;
  c.timeout = timeout;
  return c;
}

}  // namespace dscpp::test
