#include "collectives/comms_logger.h"

#include "core/log.h"

#include <fmt/format.h>

namespace dscpp::comm {

namespace {

struct Alias {
  const char* name;
  OpKind kind;
};
constexpr Alias kAliases[] = {
    {"all_reduce", OpKind::allreduce},
    {"allreduce", OpKind::allreduce},
    {"all_gather", OpKind::allgather},
    {"all_gather_into_tensor", OpKind::allgather},
    {"allgather", OpKind::allgather},
    {"reduce_scatter", OpKind::reduce_scatter},
    {"reduce_scatter_tensor", OpKind::reduce_scatter},
    {"broadcast", OpKind::broadcast},
    {"all_to_all", OpKind::all_to_all},
    {"all_to_all_single", OpKind::all_to_all},
    {"barrier", OpKind::barrier},
};

double gbps(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

std::string size_text(size_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= (1u << 10)) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / (1 << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace

std::optional<OpKind> comm_op_from_name(std::string_view name) {
  for (const Alias& a : kAliases)
    if (name == a.name) return a.kind;
  return std::nullopt;
}

std::string comm_op_names() {
  std::string out;
  for (const Alias& a : kAliases) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

double bus_factor(OpKind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case OpKind::allreduce:
      return ranks > 1 ? 2 * (n - 1) / n : 0;
    case OpKind::reduce_scatter:
    case OpKind::allgather:
    case OpKind::all_to_all:
      return ranks > 1 ? (n - 1) / n : 0;
    case OpKind::broadcast:
      return ranks > 1 ? 1 : 0;
    case OpKind::barrier:
      return 0;
  }
  return 0;
}

CommsLogger::CommsLogger(CommsLoggerOptions options, int rank, int ranks)
    : options_(std::move(options)), rank_(rank), ranks_(ranks) {}

bool CommsLogger::wanted(OpKind kind) const {
  if (options_.prof_all) return true;
  for (OpKind k : options_.prof_ops)
    if (k == kind) return true;
  return false;
}

void CommsLogger::record(const OpRecord& op) {
  if (!wanted(op.kind)) return;
  const double seconds = op.end_s - op.start_s;
  const double algbw = gbps(op.bytes, seconds);
  {
    std::lock_guard lock(mutex_);
    Row& r = rows_[{op.kind, op.bytes}];
    r.kind = op.kind;
    r.bytes = op.bytes;
    ++r.count;
    r.total_s += seconds;
    r.algbw_sum += algbw;
  }
  if (options_.verbose)
    log::info("comm op: {} | time (ms): {:.3f} | msg size: {} | algbw (GB/s): {:.3f} | busbw (GB/s): {:.3f} (rank {})",
              op_kind_name(op.kind), 1e3 * seconds, size_text(op.bytes), algbw, algbw * bus_factor(op.kind, ranks_),
              rank_);
}

std::vector<CommsLogger::Row> CommsLogger::rows() const {
  std::lock_guard lock(mutex_);
  std::vector<Row> out;
  for (const auto& [key, row] : rows_) out.push_back(row);
  return out;
}

std::string CommsLogger::summary() const {
  std::string out =
      fmt::format("communication summary (rank {} of {}):\n{:<16}{:>14}{:>9}{:>16}{:>14}{:>16}{:>16}", rank_, ranks_,
                  "op", "message size", "count", "total lat (ms)", "avg lat (ms)", "algbw (GB/s)", "busbw (GB/s)");
  int64_t ops = 0;
  size_t bytes = 0;
  double seconds = 0;
  for (const Row& r : rows()) {
    const double mean_algbw = r.algbw_sum / static_cast<double>(r.count);
    out += fmt::format("\n{:<16}{:>14}{:>9}{:>16.3f}{:>14.3f}{:>16.3f}{:>16.3f}", op_kind_name(r.kind),
                       size_text(r.bytes), r.count, 1e3 * r.total_s, 1e3 * r.total_s / static_cast<double>(r.count),
                       mean_algbw, mean_algbw * bus_factor(r.kind, ranks_));
    ops += r.count;
    bytes += r.bytes * static_cast<size_t>(r.count);
    seconds += r.total_s;
  }
  out +=
      fmt::format("\ntotal: {} operations, {} payload, {:.3f} ms in the engine", ops, size_text(bytes), 1e3 * seconds);
  return out;
}

std::shared_ptr<CommsLogger> attach_comms_logger(Communicator& comm, CommsLoggerOptions options) {
  auto logger = std::make_shared<CommsLogger>(std::move(options), comm.rank(), comm.size());
  comm.set_op_observer([logger](const OpRecord& op) { logger->record(op); });
  return logger;
}

}  // namespace dscpp::comm
