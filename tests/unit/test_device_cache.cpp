// The pieces of the CUDA device that need no GPU: the caching allocator (over a counting
// malloc backend) and the device choice from LOCAL_RANK and the visible devices.
#include "core/error.h"
#include "device/caching_allocator.h"
#include "device/device_select.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

using namespace dscpp;

TEST_CASE("CachingAllocator: size classes, reuse, retry after emptying the cache", "[device_cache]") {
  CHECK(CachingAllocator::size_class(1) == 512);
  CHECK(CachingAllocator::size_class(512) == 512);
  CHECK(CachingAllocator::size_class(513) == 1024);
  CHECK(CachingAllocator::size_class((1 << 20) - 1) == (1 << 20));
  CHECK(CachingAllocator::size_class(1 << 20) == (2 << 20));
  CHECK(CachingAllocator::size_class((2 << 20) + 1) == (4 << 20));

  int raw_allocs = 0, raw_frees = 0;
  size_t budget = 8 << 20;  // the fake device's memory
  std::set<void*> outstanding;
  {
    CachingAllocator a(
        [&](size_t bytes) -> void* {
          if (bytes > budget) return nullptr;
          budget -= bytes;
          ++raw_allocs;
          return std::malloc(bytes);
        },
        [&](void* p) {
          ++raw_frees;
          std::free(p);
        });
    CHECK(a.allocate(0) == nullptr);
    void* p = a.allocate(1000);
    a.release(p);
    CHECK(a.cached_bytes() == 1024);
    CHECK(a.allocate(900) == p);  // same class: the cached block, no raw call
    CHECK(raw_allocs == 1);
    CHECK(a.cached_bytes() == 0);
    a.release(p);
    // 3 × 2 MiB blocks cached, then a 6 MiB request only fits once the cache is emptied.
    void* b[3];
    for (void*& x : b) x = a.allocate(2 << 20);
    for (void* x : b) a.release(x);
    CHECK(a.reserved_bytes() == (3u * (2 << 20) + 1024));
    budget = 0;                             // the fake device is full; its frees do not give memory back
    CHECK(a.allocate(6 << 20) == nullptr);  // the cache is emptied before giving up ...
    CHECK(a.cached_bytes() == 0);
    CHECK(raw_frees == 4);
    budget = 6 << 20;
    void* big = a.allocate(6 << 20);  // ... and a retry with room succeeds
    CHECK(big != nullptr);
    CHECK_THROWS_WITH(a.release(reinterpret_cast<void*>(0x10)), Catch::Contains("was not allocated here"));
    a.release(big);
  }
  CHECK(raw_allocs == raw_frees);  // the destructor returned the cache
}

TEST_CASE("choose_cuda_device: LOCAL_RANK among the visible devices, or the only one", "[device_cache]") {
  CHECK(choose_cuda_device(std::nullopt, 4, std::nullopt) == 0);
  CHECK(choose_cuda_device(3, 4, std::nullopt) == 3);
  CHECK(choose_cuda_device(5, 1, std::string("5")) == 0);  // the launcher narrowed the list per rank
  CHECK_THROWS_WITH(choose_cuda_device(4, 4, std::string("0,1,2,3")),
                    Catch::Contains("LOCAL_RANK=4 but only 4 CUDA devices") && Catch::Contains("0,1,2,3"));
  CHECK_THROWS_WITH(choose_cuda_device(0, 0, std::nullopt),
                    Catch::Contains("no CUDA device is visible") && Catch::Contains("CUDA_VISIBLE_DEVICES unset"));
  CHECK_THROWS_WITH(choose_cuda_device(-1, 2, std::nullopt), Catch::Contains("negative"));
}

TEST_CASE("choose_cuda_device: more ranks than GPUs share them only over host-memory backends", "[device_cache]") {
  // LOCAL_RANK mod the visible devices: 3 of 2 lands on device 1, 4 of 2 on device 0.
  CHECK(choose_cuda_device(3, 2, std::nullopt, "gloo") == 1);
  CHECK(choose_cuda_device(4, 2, std::nullopt, "shm") == 0);
  CHECK(choose_cuda_device(5, 3, std::string("0,1,2"), "mpi") == 2);
  CHECK(choose_cuda_device(1, 2, std::nullopt, "gloo") == 1);  // within the devices: its own, as before
  CHECK(choose_cuda_device(1, 1, std::nullopt, "nccl") == 0);  // one device: indistinguishable from its own

  CHECK_THROWS_WITH(choose_cuda_device(3, 2, std::nullopt, "nccl"),
                    Catch::Contains("LOCAL_RANK=3 but only 2 CUDA devices are visible (CUDA_VISIBLE_DEVICES unset)") &&
                        Catch::Contains("the nccl backend needs one GPU per rank") &&
                        Catch::Contains("start at most 2 ranks on this node") &&
                        Catch::Contains("pass --comm_backend shm or --comm_backend gloo to let ranks share the GPUs"));
  CHECK_THROWS_WITH(choose_cuda_device(3, 2, std::nullopt),
                    Catch::Contains("the default backend (auto: nccl for ranks on GPUs) needs one GPU per rank"));
  CHECK_THROWS_WITH(choose_cuda_device(2, 2, std::nullopt, ""), Catch::Contains("the default backend (auto"));
  CHECK(choose_cuda_device(2, 2, std::nullopt, "hierarchical") == 0);

  CHECK(backend_lets_ranks_share_gpu("shm"));
  CHECK(backend_lets_ranks_share_gpu("gloo"));
  CHECK(backend_lets_ranks_share_gpu("mpi"));
  CHECK_FALSE(backend_lets_ranks_share_gpu("nccl"));
  CHECK_FALSE(backend_lets_ranks_share_gpu("auto"));
  CHECK_FALSE(backend_lets_ranks_share_gpu(""));
  CHECK(backend_lets_ranks_share_gpu("hierarchical"));
}

TEST_CASE("comm_backend_setting: dscpp-runtime's --comm_backend, else DSCPP_COMM_BACKEND, else auto",
          "[device_cache]") {
  ::unsetenv("DSCPP_COMM_BACKEND");
  CHECK(comm_backend_setting("") == "auto");
  CHECK(comm_backend_setting("gloo") == "gloo");
  ::setenv("DSCPP_COMM_BACKEND", "shm", 1);
  CHECK(comm_backend_setting("") == "shm");
  CHECK(comm_backend_setting("nccl") == "nccl");  // the flag wins
  ::unsetenv("DSCPP_COMM_BACKEND");
}

TEST_CASE("cuda_device_shared: only when another rank of the host must be on the same device", "[device_cache]") {
  CHECK(cuda_device_shared(3, 2, std::nullopt));
  CHECK(cuda_device_shared(2, 2, std::string("0,1")));
  CHECK(cuda_device_shared(1, 1, std::nullopt));  // both ranks see the one GPU
  CHECK_FALSE(cuda_device_shared(1, 1, std::string("1")));  // the launcher gave this rank its own
  CHECK_FALSE(cuda_device_shared(1, 2, std::nullopt));
  CHECK_FALSE(cuda_device_shared(std::nullopt, 1, std::nullopt));
  CHECK_FALSE(cuda_device_shared(0, 0, std::nullopt));
}
