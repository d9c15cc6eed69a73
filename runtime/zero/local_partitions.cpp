#include "runtime/zero/local_partitions.h"

#include "checkpoint/manifest.h"
#include "core/error.h"

#include <fmt/ranges.h>

#include <algorithm>

namespace dscpp::runtime {

namespace {
constexpr int64_t kChunk = int64_t{4} << 20;  // elements staged per read while loading
}

ckpt::PartitionLayout checkpoint_layout(const FlatLayout& layout) {
  ckpt::PartitionLayout out;
  out.parts = layout.parts;
  out.total = layout.total;
  out.part_total = layout.part_total;
  for (const ParamSlot& s : layout.params) out.params.push_back(ckpt::ParamDesc{s.name, s.shape, s.numel, s.offset});
  for (const PartitionGroup& g : layout.groups)
    out.groups.push_back(ckpt::GroupDesc{g.first_layer, g.end_layer, g.begin, g.numel, g.part, g.part_offset});
  return out;
}

LocalPartitions::LocalPartitions(const FlatLayout& layout, int rank, MasterWeights* master, Optimizer* optimizer,
                                 ParamStore* params)
    : layout_(checkpoint_layout(layout)),
      rank_(layout.parts == 1 ? 0 : rank),
      master_(master),
      optimizer_(optimizer),
      params_(params) {
  DSCPP_CHECK((master && optimizer) || (!master && !optimizer && params));
  if (!master_) return;
  bool first = true;
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    int oi = master_->optimizer_group(static_cast<int>(g));
    if (oi < 0) continue;
    std::vector<std::string> names;
    for (const StateTensor& s : optimizer_->state(oi)) names.push_back(s.name);
    if (first) states_ = names;
    // SGD creates its momentum buffer lazily, but for every group in the same step.
    DSCPP_CHECK(names == states_);
    first = false;
  }
}

int64_t LocalPartitions::optimizer_step() const {
  if (!master_) return 0;
  int64_t step = -1;
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    int oi = master_->optimizer_group(static_cast<int>(g));
    if (oi < 0) continue;
    if (step < 0) step = optimizer_->step_count(oi);
    DSCPP_CHECK_EQ(optimizer_->step_count(oi), step);  // every group steps together
  }
  return std::max<int64_t>(step, 0);
}

void LocalPartitions::copy_out(const std::string& what, int64_t part_at, int64_t count, float* host) const {
  DSCPP_CHECK(master_);  // a weights-only engine does not save
  for (const ckpt::GroupSpan& s : ckpt::group_spans(layout_, part_at, count))
    master_->copy_out(what, s.group, s.offset, s.count, host + (s.part_at - part_at));
}

void LocalPartitions::copy_in(const std::string& what, int64_t part_at, int64_t count, const float* host) {
  if (!master_) {
    DSCPP_CHECK(what == ckpt::kMasterWeights);
    for (const ckpt::GroupSpan& s : ckpt::group_spans(layout_, part_at, count))
      params_->home().write_from_host(s.group, s.offset, s.count, host + (s.part_at - part_at));
    return;
  }
  for (const ckpt::GroupSpan& s : ckpt::group_spans(layout_, part_at, count))
    master_->copy_in(what, s.group, s.offset, s.count, host + (s.part_at - part_at));
}

void LocalPartitions::copy_param_out(size_t param, const std::string& what, int64_t first, int64_t count,
                                     float* dst) const {
  for (const ckpt::Fragment& f : ckpt::fragments(layout_, param, first, count)) {
    DSCPP_CHECK(layout_.parts == 1 || f.rank == rank_);
    copy_out(what, f.part_at, f.count, dst + (f.param_first - first));
  }
}

void LocalPartitions::load_owned(ckpt::TensorSource& source, const std::vector<std::string>& whats,
                                 bool skip_missing) {
  std::vector<float> buf;
  for (size_t i = 0; i < layout_.params.size(); ++i) {
    const int64_t at = source.find(layout_.params[i].name);
    if (at < 0 && skip_missing) continue;
    if (at < 0) fail("{}: parameter '{}' is missing", source.description(), layout_.params[i].name);
    for (const ckpt::Fragment& f : ckpt::owned_fragments(layout_, i, rank_)) {
      buf.resize(static_cast<size_t>(std::min(kChunk, std::max<int64_t>(f.count, static_cast<int64_t>(buf.size())))));
      for (const std::string& what : whats)
        for (int64_t done = 0; done < f.count;) {
          const int64_t n = std::min(kChunk, f.count - done);
          source.read(static_cast<size_t>(at), what, f.param_first + done, n, buf.data());
          copy_in(what, f.part_at + done, n, buf.data());
          done += n;
        }
    }
  }
  if (master_) master_->flush();
}

}  // namespace dscpp::runtime
