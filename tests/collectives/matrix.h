// The collective correctness matrix: every operation, dtype and size on a communicator,
// checked against a serial reference each rank computes for itself (every rank can generate
// every other rank's input). Used by the thread-rank unit tests and by the multi-process
// checks that run under dscpp, mpirun and srun.
#pragma once

#include "collectives/communicator.h"

#include <cstddef>
#include <vector>

namespace dscpp::test {

struct MatrixOptions {
  std::vector<size_t> counts{0, 1, 7, 1000, (1u << 18) + 3};
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16, DType::f64};
  bool async_overlap = true;  // also run a batch of async operations around a compute loop
  // Buffers in this device's memory (copied in and out by the checker) instead of host memory:
  // cuda-sim's protected memory exercises the Communicator's staging for every engine.
  Device* device = nullptr;
};

// Collective: every rank of `comm` calls it with the same options. Throws dscpp::Error naming
// the operation, dtype, count, element, value found and value expected at the first mismatch.
// Returns the number of checks made.
size_t check_collectives(comm::Communicator& comm, const MatrixOptions& options = {});

// Relative tolerance for averages, which are inexact: a couple of units in the last place
// of the result type (fp16/bf16 averages may be rounded twice when an engine stages via fp32).
double avg_tolerance(DType t);

}  // namespace dscpp::test
