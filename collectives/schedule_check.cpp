#include "collectives/schedule_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dscpp::comm {
namespace {

constexpr uint32_t kScheduleMagic = 0x48435344;  // "DSCH" in memory on little-endian hosts

// FNV-1a: the history hash only has to make equal histories equal and different ones
// different with overwhelming odds; it is never exposed beyond a message.
uint64_t fnv1a(uint64_t hash, const void* data, size_t bytes) {
  if (hash == 0) hash = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

std::string label_of(const ScheduleSignature& s) {
  return std::string(s.label, strnlen(s.label, ScheduleSignature::kLabelBytes));
}

bool same_bytes(const ScheduleSignature& a, const ScheduleSignature& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// The operation without its place in the schedule, to tell "different operation" from
// "same operation at a different point".
ScheduleSignature what_of(ScheduleSignature s) {
  s.seq = 0;
  s.history = 0;
  return s;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks);
}

std::string plural(uint64_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

ScheduleEntry ScheduleCheck::sign(ScheduleSignature s, std::string_view label) {
  s.magic = kScheduleMagic;
  std::memcpy(s.label, label.data(), std::min(label.size(), ScheduleSignature::kLabelBytes - 1));
  s.history = history_;
  history_ = fnv1a(history_, &s, sizeof s);
  return {s, since_checkpoint_ + 1, last_checkpoint_};
}

ScheduleEntry ScheduleCheck::sign_op(const OpDesc& op, uint64_t seq) {
  // Fields an operation ignores are left 0, so that ranks passing different unused values
  // (a broadcast root on an allreduce) do not count as diverged.
  ScheduleSignature s;
  s.kind = static_cast<uint8_t>(op.kind);
  s.seq = seq;
  if (op.kind != OpKind::barrier) {
    s.dtype = static_cast<uint8_t>(op.dtype);
    s.count = op.count;
  }
  if (op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter) s.reduce = static_cast<uint8_t>(op.reduce);
  if (op.kind == OpKind::broadcast) s.root = op.root;
  ScheduleEntry entry = sign(s, label_);
  ++since_checkpoint_;
  return entry;
}

ScheduleEntry ScheduleCheck::sign_mark(ScheduleMark mark, std::string_view label, uint64_t seq) {
  ScheduleSignature s;
  s.kind = static_cast<uint8_t>(mark);
  s.seq = seq;
  ScheduleEntry entry = sign(s, label);
  if (mark == ScheduleMark::checkpoint) {
    since_checkpoint_ = 0;
    last_checkpoint_ = label_of(entry.signature);
  } else {
    ++since_checkpoint_;  // a split takes an operation number of its own
  }
  return entry;
}

ScheduleEntry ScheduleCheck::sign_checkpoint(std::string_view label, uint64_t seq) {
  return sign_mark(ScheduleMark::checkpoint, label, seq);
}

ScheduleEntry ScheduleCheck::sign_split(uint64_t seq) {
  return sign_mark(ScheduleMark::split, label_, seq);
}

void ScheduleCheck::verify(Backend& backend, const ScheduleEntry& entry) {
  if (!diverged_.empty()) throw Error(diverged_);
  if (size_ <= 1) return;
  gathered_.assign(static_cast<size_t>(size_), ScheduleSignature{});
  backend.allgather_host(&entry.signature, gathered_.data(), sizeof(ScheduleSignature));
  diverged_ = describe_divergence(group_, gathered_, entry);
  if (!diverged_.empty()) throw Error(diverged_);
}

std::string describe_signature(const ScheduleSignature& s) {
  const std::string label = label_of(s);
  if (s.kind == static_cast<uint8_t>(ScheduleMark::checkpoint))
    return fmt::format("reached checkpoint '{}' after {}", label, plural(s.seq - 1, "collective"));
  if (s.kind == static_cast<uint8_t>(ScheduleMark::split))
    return "called split" + (label.empty() ? "" : fmt::format(" labelled '{}'", label));
  if (s.kind > static_cast<uint8_t>(OpKind::all_to_all))
    return fmt::format("sent an unknown signature kind {}", s.kind);
  const auto kind = static_cast<OpKind>(s.kind);
  const std::string dtype = s.dtype <= static_cast<uint8_t>(DType::i64)
                                ? std::string(dtype_name(static_cast<DType>(s.dtype)))
                                : fmt::format("dtype {}", s.dtype);
  const std::string elements = plural(s.count, "element");
  std::string text;
  switch (kind) {
    case OpKind::barrier:
      text = "barrier";
      break;
    case OpKind::allreduce:
      text = fmt::format("allreduce({} {}, {})", dtype, reduce_op_name(static_cast<ReduceOp>(s.reduce)), elements);
      break;
    case OpKind::reduce_scatter:
      text = fmt::format("reduce_scatter({} {}, {} per rank)", dtype, reduce_op_name(static_cast<ReduceOp>(s.reduce)),
                         elements);
      break;
    case OpKind::allgather:
    case OpKind::all_to_all:
      text = fmt::format("{}({}, {} per rank)", op_kind_name(kind), dtype, elements);
      break;
    case OpKind::broadcast:
      text = fmt::format("broadcast({}, {}, root {})", dtype, elements, s.root);
      break;
  }
  return "issued " + text + (label.empty() ? "" : fmt::format(" labelled '{}'", label));
}

std::string describe_divergence(const std::string& group, const std::vector<ScheduleSignature>& all,
                                const ScheduleEntry& mine) {
  std::vector<int> unsigned_ranks;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].magic != kScheduleMagic) unsigned_ranks.push_back(static_cast<int>(r));
  if (!unsigned_ranks.empty())
    return fmt::format(
        "--check_schedule: group '{}' at collective #{}: {} sent no schedule signature, so schedule checking is off "
        "there; turn it on for every rank of the group at the same point (DSCPP_CHECK_SCHEDULE=1 on every rank)",
        group, mine.signature.seq, ranks_text(unsigned_ranks));

  struct Group {
    const ScheduleSignature* signature;
    std::vector<int> ranks;
  };
  std::vector<Group> groups;  // in order of their lowest rank
  for (size_t r = 0; r < all.size(); ++r) {
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return same_bytes(*g.signature, all[r]); });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{&all[r], {}});
    it->ranks.push_back(static_cast<int>(r));
  }
  if (groups.size() == 1) return {};

  auto all_equal = [&](auto field) {
    return std::all_of(all.begin(), all.end(), [&](const ScheduleSignature& s) { return field(s) == field(all[0]); });
  };
  const bool same_seq = all_equal([](const ScheduleSignature& s) { return s.seq; });
  const bool same_history = all_equal([](const ScheduleSignature& s) { return s.history; });
  const bool same_what = std::all_of(
      all.begin(), all.end(), [&](const ScheduleSignature& s) { return same_bytes(what_of(s), what_of(all[0])); });

  std::string message = fmt::format("--check_schedule: ranks diverged in group '{}' at ", group);
  message += same_seq ? fmt::format("collective #{}", all[0].seq) : std::string("different collective numbers");
  // The local checkpoint context is everyone's only when every history agrees.
  if (same_seq && same_history && !mine.last_checkpoint.empty())
    message += fmt::format(" (#{} since checkpoint '{}')", mine.since_checkpoint, mine.last_checkpoint);
  message += ": ";

  if (same_what && same_seq) {
    std::string histories;
    for (const auto& g : groups)
      histories += (histories.empty() ? "one history on " : ", another on ") + ranks_text(g.ranks);
    return message + fmt::format(
                         "every rank {}, but their earlier collectives on the group differed ({}); schedule checking "
                         "was turned on at different points",
                         describe_signature(all[0]), histories);
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const ScheduleSignature& s = *groups[i].signature;
    bool mark = s.kind >= static_cast<uint8_t>(ScheduleMark::checkpoint);
    message += i == 0 ? "" : i == 1 ? " but " : "; ";
    message += ranks_text(groups[i].ranks) + " " + describe_signature(s);
    if (!same_seq && !mark) message += fmt::format(" as collective #{}", s.seq);
  }
  if (!same_history)
    message +=
        "; their earlier collectives on the group differed too (schedule checking turned on at different points?)";
  return message;
}

}  // namespace dscpp::comm
