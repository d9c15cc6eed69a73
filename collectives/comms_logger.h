// DeepSpeed's comms_logger for a Communicator: per collective kind and message size, how many
// operations ran, their latency, and the bandwidths nccl-tests reports (doc/PERFORMANCE.md):
//   algbw = bytes / latency      (bytes: the op's payload — for allgather, reduce_scatter and
//                                 all_to_all the whole size()·count buffer, as nccl-tests counts)
//   busbw = algbw · factor       allreduce 2(n−1)/n; reduce_scatter, allgather, all_to_all
//                                (n−1)/n; broadcast 1; barrier 0
// Latency is the time the operation spent in the engine on this rank's progress thread (from
// when it started running to when it finished), so time queued behind earlier asynchronous
// operations is not counted. Bandwidths are in GB/s (10⁹ bytes), as nccl-tests prints them
// (DeepSpeed prints Gbps: ×8).
#pragma once

#include "collectives/communicator.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dscpp::comm {

struct CommsLoggerOptions {
  bool verbose = false;  // log every operation as it finishes
  bool prof_all = true;  // every kind; else only prof_ops
  std::vector<OpKind> prof_ops;
};

// DeepSpeed's op names ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
// "all_to_all_single", "broadcast", "barrier") and dscpp's (op_kind_name); nullopt otherwise.
std::optional<OpKind> comm_op_from_name(std::string_view name);
// The accepted names, for error messages.
std::string comm_op_names();

double bus_factor(OpKind kind, int ranks);

class CommsLogger {
 public:
  CommsLogger(CommsLoggerOptions options, int rank, int ranks);

  // Records one finished operation (thread-safe; the Communicator's observer calls it).
  void record(const OpRecord& op);

  struct Row {
    OpKind kind = OpKind::barrier;
    size_t bytes = 0;
    int64_t count = 0;
    double total_s = 0;
    double algbw_sum = 0;  // GB/s, summed over the operations (mean = sum / count)
  };
  std::vector<Row> rows() const;  // by kind, then size
  // The table DeepSpeed's log_summary prints: op, message size, count, total and mean latency,
  // mean algbw and busbw; and a total line.
  std::string summary() const;

 private:
  bool wanted(OpKind kind) const;

  CommsLoggerOptions options_;
  int rank_, ranks_;
  mutable std::mutex mutex_;
  std::map<std::pair<OpKind, size_t>, Row> rows_;
};

// Attaches a logger to `comm` (its observer) and returns it; the observer shares ownership, so
// the logger outlives the communicator's last callback.
std::shared_ptr<CommsLogger> attach_comms_logger(Communicator& comm, CommsLoggerOptions options);

}  // namespace dscpp::comm
