// One process-wide pool of worker threads for CPU kernels (elementwise ops, optimizer steps).
//
// Why our own and not OpenMP: OpenBLAS runs its own pthread pool for GEMM, and two pools that
// spin-wait on 2 cores steal each other's time. These workers spin for at most 50 µs after a
// parallel_for ends, then block on a futex-backed condition: long enough to catch the next job
// of a run of small ones (decoding issues hundreds a token, and a futex wake-up under a
// hypervisor costs tens of microseconds), too short to hold a core OpenBLAS's threads need. The
// runtime sets both pools to the same thread count (`set_num_threads`, `openblas_set_num_threads`).
//
// parallel_for is not re-entrant: a body must not call parallel_for (it runs serially if it does).
#pragma once

#include <cstdint>
#include <functional>

namespace dscpp {

// Number of threads parallel_for uses (the caller included). Default: hardware threads, or
// DSCPP_NUM_THREADS / OMP_NUM_THREADS when set.
int num_threads();
void set_num_threads(int n);

// Runs body(begin, end) over [0, n) split into at most num_threads() contiguous chunks, each a
// multiple of `align` elements except the last, and none smaller than `grain` elements (so
// small loops run on the calling thread alone). Returns when every chunk is done; an exception
// thrown by a body is rethrown here (the first one).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body, int64_t align = 1);

}  // namespace dscpp
