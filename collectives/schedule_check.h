// The schedule check (`--check_schedule`, DSCPP_CHECK_SCHEDULE=1): turns the deadlock that
// ranks taking different paths meet inside an engine into one error, raised on every rank at
// once, naming the first operation where they differ.
//
// How: with checking on, each operation of a Communicator is preceded, on its progress thread
// and in issue order, by an allgather of a fixed-size ScheduleSignature through the group's own
// engine (Backend::allgather_host; not counted as a user operation). Every rank then holds every
// rank's signature and compares them; all ranks see the same bytes, so all reach the same
// verdict and throw the same message. A rank that has fewer operations in a step reaches
// Communicator::schedule_checkpoint("end of step 3") instead, which exchanges a checkpoint
// signature, so it is matched against a rank still issuing collectives. split() exchanges one
// too, before its store exchange. After a divergence every later checked operation of the
// group fails with the same message without touching the engine.
//
// A signature holds: the operation's kind, dtype, reduce op (reductions only), element count,
// root (broadcast only), its sequence number on the group, a running hash of every earlier
// signature of the group, and the label set with Communicator::set_schedule_label().
//
// What it cannot catch (these behave as without it: wrong data, or a hang ended by the group
// timeout and its report):
//   - differences outside the signature: the same operation, dtype and count on different
//     buffers, with different contents, or meant for a different purpose under the same label;
//   - ordering across groups: rank 0 issuing on 'world' then 'node' while rank 1 does the
//     reverse leaves each group waiting for the other;
//   - a rank that issues nothing more on the group (computes forever, exits without a
//     checkpoint): the others wait in the exchange until the group timeout, which names it;
//   - ranks that disagree on whether checking is on. When the exchange meets a rank's real
//     allgather of the same byte size, the missing signature is reported; otherwise the engine
//     fails or hangs as for any mismatched pair of operations.
// Cost when on: one allgather of 128 bytes per rank before every operation. When off: one
// branch per operation; schedule_checkpoint() returns at once.
#pragma once

#include "collectives/backend.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::comm {

// What the ranks exchange, byte for byte: fixed size, no padding, no pointers.
struct ScheduleSignature {
  static constexpr size_t kLabelBytes = 88;  // longer labels are cut (and compared cut)

  uint32_t magic = 0;      // tells a signature from another rank's unrelated allgather data
  uint8_t kind = 0;        // an OpKind, or a ScheduleMark below
  uint8_t dtype = 0;       // 0 where it does not matter (barrier, marks)
  uint8_t reduce = 0;      // 0 unless allreduce / reduce_scatter
  uint8_t reserved = 0;    // always 0
  int32_t root = 0;        // 0 unless broadcast
  uint32_t reserved2 = 0;  // always 0
  uint64_t count = 0;      // as passed by the caller (per rank slice for the sliced operations)
  uint64_t seq = 0;        // the operation's number on the group; a mark: the next operation's
  uint64_t history = 0;    // hash of every earlier signature of the group, in order
  char label[kLabelBytes] = {};
};
static_assert(sizeof(ScheduleSignature) == 128, "the exchanged signature must not change size with the compiler");

// Points of the schedule that are not operations but are compared like them.
enum class ScheduleMark : uint8_t { checkpoint = 0xc0, split = 0xc1 };

// A signature plus what this rank knows locally about where it sits; the local part is only
// used in messages when every rank's history agrees, so it is the same on every rank.
struct ScheduleEntry {
  ScheduleSignature signature;
  uint64_t since_checkpoint = 0;  // this operation's position after the last checkpoint (1 = first)
  std::string last_checkpoint;    // that checkpoint's label; empty before the first
};

// One group's check. sign_*() and set_label() run in issue order under the Communicator's
// queue lock; verify() runs on its progress thread. They share no state.
class ScheduleCheck {
 public:
  ScheduleCheck(std::string group, int size) : group_(std::move(group)), size_(size) {}

  void set_label(std::string_view label) { label_ = label; }
  ScheduleEntry sign_op(const OpDesc& op, uint64_t seq);
  // `seq`: the number the next operation will get (a split takes it for itself). A split is
  // signed with the current label, not its group name, which may differ between colors.
  ScheduleEntry sign_checkpoint(std::string_view label, uint64_t seq);
  ScheduleEntry sign_split(uint64_t seq);

  // Collective: exchanges `entry`'s signature with every rank of the group through `backend`
  // and throws dscpp::Error (the same on every rank) when they differ; from then on throws that
  // error at once.
  void verify(Backend& backend, const ScheduleEntry& entry);

 private:
  ScheduleEntry sign(ScheduleSignature s, std::string_view label);
  ScheduleEntry sign_mark(ScheduleMark mark, std::string_view label, uint64_t seq);

  std::string group_;
  int size_;
  std::string label_;
  uint64_t history_ = 0;
  uint64_t since_checkpoint_ = 0;
  std::string last_checkpoint_;
  std::vector<ScheduleSignature> gathered_;
  std::string diverged_;
};

// The verdict on the signatures gathered from every rank (index = rank): empty when they
// agree, else the message every rank throws. `mine` supplies the checkpoint context.
std::string describe_divergence(const std::string& group, const std::vector<ScheduleSignature>& all,
                                const ScheduleEntry& mine);

// What a rank did, for messages: "issued allreduce(fp32 sum, 4096 elements)",
// "reached checkpoint 'end of step 3' after 16 collectives", "called split labelled 'zero++ groups'".
std::string describe_signature(const ScheduleSignature& s);

}  // namespace dscpp::comm
