// `dscpp aio-bench`'s measurements: DeepSpeed ds_io-style passes over one preallocated file,
// each pass one request of the whole file (split over thread_count workers, cut into
// block_size pieces, queue_depth deep), timed from submission to completion.
#pragma once

#include "offload/aio_options.h"
#include "offload/aligned_buffer.h"
#include "offload/direct_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dscpp::offload {

struct PassResult {
  double write_gbps = 0;  // 10^9 bytes per second
  double read_gbps = 0;
};

// One write pass then one read pass of `size` bytes of `file` with `options`, moving `buffer`
// (at least `size` bytes). When both passes run, the read is checked against what was just
// written, so a fast but wrong configuration cannot win. Throws dscpp::Error on I/O failure or mismatch.
PassResult measure_passes(const DirectFile& file, AlignedBuffer& buffer, int64_t size, const AioOptions& options,
                          bool do_write = true, bool do_read = true);

// Every combination of the lists, in a stable order (block size, then queue depth, threads,
// single_submit, overlap_events), each starting from `base` (backend and the rest).
std::vector<AioOptions> sweep_grid(const AioOptions& base, const std::vector<int64_t>& block_sizes,
                                   const std::vector<int>& queue_depths, const std::vector<int>& threads,
                                   const std::vector<bool>& single_submit, const std::vector<bool>& overlap_events);

double median(std::vector<double> values);

}  // namespace dscpp::offload
