// A Communicator's forensics, kept apart from the progress thread that runs its operations (as
// PyTorch's c10d keeps its flight recorder apart from the process group): the ring of this
// rank's recent operations, the progress publisher that tells the other ranks how far it got,
// and the hang report that reads theirs when an operation does not finish.
//
// The publisher writes "<seq> <op> <end>" to the group's store under progress/<rank> at most
// once a second, and only when it changed, so that a rank that times out can say how far every
// peer got without asking them anything (a stopped peer cannot answer). The report adds
// hang/<rank> = the operation it waited in, and classifies each peer as waiting in the same
// operation, behind (with the last operation it finished), or silent.
//
// The recorder keeps its own copy of what it needs from the group (store, name, rank, size,
// timeout, engine name): a Communicator whose engine hung abandons it to a report that may
// still be running, rather than destroy it under that report.
#pragma once

#include "collectives/backend.h"
#include "collectives/communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dscpp::comm {

class FlightRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kRing = 64;  // operations kept
  // The longest a hang report can take: its fixed waits (~6 s) plus one store call at the
  // longest reply timeout (store_reply_timeout, 60 s), which marks a stalled store for the rest.
  static constexpr std::chrono::seconds kReportBound{120};

  // Starts the progress publisher.
  FlightRecorder(const GroupContext& context, std::string_view engine);
  ~FlightRecorder();  // stops the publisher if stop() has not
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Seconds since the recorder (its Communicator) was created: the records' clock.
  double now_s() const { return std::chrono::duration<double>(Clock::now() - created_).count(); }

  // An operation issued (end_s 0); the oldest record leaves a full ring. In issue order.
  void record(const OpRecord& op);
  // Operation `seq` left the engine at `end_s`, with or without error.
  void finished(uint64_t seq, double end_s);
  // Operation `seq` completed without error: the progress the publisher reports.
  void completed(uint64_t seq) { last_done_ = seq; }
  // The ring, oldest first.
  std::vector<OpRecord> recent() const;

  // Stops the publisher and waits for it. Idempotent.
  void stop();

  // Logs this rank's recent operations, tells the other ranks how far it got, reads how far they
  // got, and throws PeerFailure naming the ranks that are behind. `seq` is the operation waited
  // in; `what` names a task that is not a recorded operation (a schedule checkpoint);
  // `engine_message` is the engine's own error when it gave up by itself.
  [[noreturn]] void report_hang(uint64_t seq, double waited_s, const std::string& engine_message,
                                const std::string& what) const;

 private:
  void publish_progress();  // the publisher thread's body

  const std::shared_ptr<Store> store_;
  const std::string group_, engine_;
  const int rank_, size_;
  const Millis timeout_;
  const Clock::time_point created_ = Clock::now();

  mutable std::mutex mutex_;  // the ring and the publisher's state
  std::deque<OpRecord> ring_;
  std::atomic<uint64_t> last_done_{0};
  bool stopping_ = false;
  std::condition_variable publisher_wake_;
  std::thread publisher_;
};

}  // namespace dscpp::comm
