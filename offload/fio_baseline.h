// The baseline `dscpp aio-bench` compares against: fio running the same pattern on the same
// file (O_DIRECT, same block size, queue depth, engine, and one job per aio thread over the
// same contiguous slice).
#pragma once

#include "offload/aio_options.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::offload {

// fio on PATH (or `explicit_path` when given and executable); nullopt when absent.
std::optional<std::string> find_fio(const std::string& explicit_path = "");
std::string fio_version(const std::string& fio);

// fio's arguments for one sequential pass over [0, size) of `file` with `options`:
// --rw=write|read --bs --iodepth --direct=1 --ioengine=<backend> --numjobs=thread_count,
// each job a contiguous slice (--size/--offset_increment) as AsyncIo splits a request;
// overlap_events=false maps to batched submission and completion of queue_depth.
std::vector<std::string> fio_args(const std::string& file, int64_t size, const AioOptions& options, bool write);

// Runs fio and returns its aggregate bandwidth in GB/s (10^9 B/s). Throws dscpp::Error with
// fio's output when it fails.
double run_fio(const std::string& fio, const std::vector<std::string>& args, bool write);

}  // namespace dscpp::offload
