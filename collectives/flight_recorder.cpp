#include "collectives/flight_recorder.h"

#include "core/error.h"
#include "core/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace dscpp::comm {

namespace {

std::string describe(const OpRecord& r) {
  if (r.kind == OpKind::barrier) return fmt::format("barrier #{}", r.seq);
  std::string what = fmt::format("{} #{} ({}", op_kind_name(r.kind), r.seq, dtype_name(r.dtype));
  if (r.kind == OpKind::allreduce || r.kind == OpKind::reduce_scatter)
    what += fmt::format(" {}", reduce_op_name(r.reduce));
  return what + fmt::format(", {:.2f} MiB)", static_cast<double>(r.bytes) / (1 << 20));
}

}  // namespace

FlightRecorder::FlightRecorder(const GroupContext& context, std::string_view engine)
    : store_(context.store),
      group_(context.name),
      engine_(engine),
      rank_(context.rank),
      size_(context.size),
      timeout_(context.timeout) {
  publisher_ = std::thread([this] { publish_progress(); });
}

FlightRecorder::~FlightRecorder() { stop(); }

void FlightRecorder::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  publisher_wake_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

void FlightRecorder::record(const OpRecord& op) {
  std::lock_guard lock(mutex_);
  ring_.push_back(op);
  if (ring_.size() > kRing) ring_.pop_front();
}

void FlightRecorder::finished(uint64_t seq, double end_s) {
  std::lock_guard lock(mutex_);
  for (auto& r : ring_)
    if (r.seq == seq) r.end_s = end_s;
}

std::vector<OpRecord> FlightRecorder::recent() const {
  std::lock_guard lock(mutex_);
  return {ring_.begin(), ring_.end()};
}

void FlightRecorder::publish_progress() {
  uint64_t published = 0;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    publisher_wake_.wait_for(lock, std::chrono::seconds(1));
    uint64_t done = last_done_;
    if (done == published || stopping_) continue;
    std::string record = fmt::format("{}", done);
    for (const auto& r : ring_)
      if (r.seq == done) record = fmt::format("{} {} {:.3f}", done, op_kind_name(r.kind), r.end_s);
    lock.unlock();
    try {
      store_->set(fmt::format("progress/{}", rank_), record);
      published = done;
    } catch (const std::exception& e) {
      log::debug("group '{}': could not publish progress: {}", group_, e.what());
    }
    lock.lock();
  }
}

void FlightRecorder::report_hang(uint64_t seq, double waited_s, const std::string& engine_message,
                                 const std::string& what) const {
  std::string mine, current = what.empty() ? fmt::format("operation #{}", seq) : what;
  for (const auto& r : recent()) {
    mine += fmt::format("\n  {}, started at {:.3f} s, {}", describe(r), r.start_s,
                        r.end_s > 0 ? fmt::format("took {:.3f} s", r.end_s - r.start_s) : std::string("unfinished"));
    if (r.seq == seq && what.empty()) current = describe(r);
  }
  log::error("group '{}' ({}): {} has not finished after {:.1f} s; this rank's last operations:{}", group_, engine_,
             current, waited_s, mine);
  const double timeout_s = std::chrono::duration<double>(timeout_).count();
  auto& store = *store_;
  struct Peer {
    int rank;
    std::string progress, hang;
  };
  std::vector<Peer> peers;
  try {
    store.set(fmt::format("progress/{}", rank_), fmt::format("{}", last_done_.load()));
    store.set(fmt::format("hang/{}", rank_), fmt::format("{}", seq));
    // Peers publish progress within a second of finishing an operation; give them that long.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // A peer stuck in this same operation writes its hang record when its own engine gives up,
    // which can be seconds after ours (a ring neighbour whose receive started later, or that
    // failed only when another rank's exit closed its connection: seen 2 s late under load).
    // Wait for the missing records up to the group timeout in all, capped at 5 s; a rank that
    // is really behind never writes one, so that case costs the whole window.
    std::vector<std::string> hang_keys;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) hang_keys.push_back(fmt::format("hang/{}", r));
    const Millis extra =
        std::clamp(std::chrono::duration_cast<Millis>(timeout_) - Millis(1500), Millis(0), Millis(3500));
    if (extra > Millis(0)) store.wait(hang_keys, extra);
    auto read = [&](const std::string& key) { return store.check(key) ? store.get(key, Millis(1000)) : std::string(); };
    for (int r = 0; r < size_; ++r)
      if (r != rank_) peers.push_back({r, read(fmt::format("progress/{}", r)), read(fmt::format("hang/{}", r))});
  } catch (const std::exception& e) {
    throw PeerFailure(fmt::format(
        "group '{}' ({}): {} did not complete within the group timeout ({:g} s; rank {} waited {:.1f} s), and the "
        "store could not be asked about the other ranks: {}",
        group_, engine_, current, timeout_s, rank_, waited_s, e.what()));
  }
  // World rank 0 hosts the store: stay a moment so that the others can finish their reading
  // before this rank's failure takes the store down.
  if (rank_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::vector<int> silent, waiting;
  std::string behind;
  for (const auto& p : peers) {
    uint64_t done = 0;
    char op[32] = "";
    double at = 0;
    int fields = p.progress.empty() ? 0 : std::sscanf(p.progress.c_str(), "%" SCNu64 " %31s %lf", &done, op, &at);
    if (p.hang == std::to_string(seq)) {
      waiting.push_back(p.rank);
    } else if (fields == 0 || (done == 0 && p.hang.empty())) {
      silent.push_back(p.rank);
    } else {
      // Progress is published at most once a second, so a peer that stopped may have done more.
      behind += fmt::format("; rank {} had finished at least #{}{}", p.rank, done,
                            fields >= 2 ? fmt::format(" ({})", op) : "");
    }
  }
  std::string message =
      fmt::format("group '{}' ({}): {} did not complete within the group timeout ({:g} s; rank {} waited {:.1f} s)",
                  group_, engine_, current, timeout_s, rank_, waited_s);
  if (!behind.empty()) message += ". Behind:" + behind.substr(1);
  if (!silent.empty())
    message += fmt::format(". Reported no progress on this group (progress is reported once a second: dead, stopped "
                           "or stuck before its first report): rank{} {}",
                           silent.size() == 1 ? "" : "s", format_rank_list(silent));
  if (!waiting.empty()) message += fmt::format(". Waiting in the same operation: {}", format_rank_list(waiting));
  if (!engine_message.empty()) message += fmt::format(". The engine said: {}", engine_message);
  throw PeerFailure(message);
}

}  // namespace dscpp::comm
