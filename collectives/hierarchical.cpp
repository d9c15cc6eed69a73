// Two-level collectives: shared memory inside a host, an engine (gloo or MPI) between hosts.
// Each of a host's L ranks carries 1/L of the data across the network, so the network sees
// every byte once per host instead of once per rank, and the intra-host part runs at memory
// bandwidth. Requires the same number of ranks on every host (create_world checks).
#include "collectives/backend.h"

#include <fmt/format.h>

#include <cstring>

namespace dscpp::comm {
namespace {

class HierarchicalBackend final : public Backend {
 public:
  HierarchicalBackend(const GroupContext& context, Hierarchy layout, std::unique_ptr<Backend> local,
                      std::unique_ptr<Backend> cross, std::unique_ptr<Backend> flat)
      : context_(context), h_(std::move(layout)), local_(std::move(local)), cross_(std::move(cross)),
        flat_(std::move(flat)) {
    DSCPP_CHECK_EQ(static_cast<int>(h_.global_rank.size()), h_.nodes * h_.local_size);
    DSCPP_CHECK_EQ(local_->size(), h_.local_size);
    DSCPP_CHECK_EQ(cross_->size(), h_.nodes);
    position_.resize(h_.global_rank.size());
    for (size_t i = 0; i < h_.global_rank.size(); ++i) position_.at(h_.global_rank[i]) = static_cast<int>(i);
    name_ = fmt::format("hierarchical({} x{} per host, {} x{} hosts)", local_->name(), h_.local_size, cross_->name(),
                        h_.nodes);
  }

  std::string_view name() const override { return name_; }
  int rank() const override { return context_.rank; }
  int size() const override { return context_.size; }
  bool supports(DType dtype, ReduceOp op) const override {
    return local_->supports(dtype, op) && cross_->supports(dtype, op);
  }

  void run(const OpDesc& op) override {
    switch (op.kind) {
      case OpKind::allreduce: return allreduce(op);
      case OpKind::reduce_scatter: return reduce_scatter(op);
      case OpKind::allgather: return allgather(op);
      case OpKind::broadcast: return broadcast(op);
      case OpKind::barrier:
        local_->run(op);
        cross_->run(op);
        return local_->run(op);
      case OpKind::all_to_all: return flat_->run(op);
    }
  }

  // One small message needs no decomposition, and the flat engine holds host buffers even when
  // the local one is nccl.
  void allgather_host(const void* input, void* output, size_t bytes) override {
    flat_->allgather_host(input, output, bytes);
  }

  // User sub-groups (e.g. ZeRO++ partition groups) run on the flat engine.
  std::unique_ptr<Backend> split(const SplitPlan& plan) override { return flat_->split(plan); }

 private:
  // Local reduce_scatter hands each local rank 1/L of the buffer, which it reduces across hosts
  // and shares back with a local allgather. avg composes: the cross-host mean of per-host
  // means is the global mean because every host has L ranks.
  void allreduce(const OpDesc& op) {
    size_t L = h_.local_size, elem = dtype_size(op.dtype);
    size_t chunk = (op.count + L - 1) / L;
    char* buf = static_cast<char*>(op.output);
    char* padded = buf;
    if (chunk * L != op.count) {
      padded = scratch(0, chunk * L * elem);
      std::memcpy(padded, buf, op.count * elem);
      std::memset(padded + op.count * elem, 0, (chunk * L - op.count) * elem);
    }
    char* mine = scratch(1, chunk * elem);
    local_->run({OpKind::reduce_scatter, padded, mine, chunk, op.dtype, op.reduce, 0});
    cross_->run({OpKind::allreduce, mine, mine, chunk, op.dtype, op.reduce, 0});
    local_->run({OpKind::allgather, mine, padded, chunk, op.dtype, op.reduce, 0});
    if (padded != buf) std::memcpy(buf, padded, op.count * elem);
  }

  // Regroup the input host-major by local index ([l][n]), reduce inside the host so local rank
  // l holds every host's slice l, then reduce those across hosts.
  void reduce_scatter(const OpDesc& op) {
    size_t L = h_.local_size, N = h_.nodes, bytes = op.count * dtype_size(op.dtype);
    const char* in = static_cast<const char*>(op.input);
    char* grouped = scratch(0, L * N * bytes);
    for (size_t l = 0; l < L; ++l)
      for (size_t n = 0; n < N; ++n)
        std::memcpy(grouped + (l * N + n) * bytes, in + h_.global_rank[n * L + l] * bytes, bytes);
    char* mine = scratch(1, N * bytes);
    local_->run({OpKind::reduce_scatter, grouped, mine, op.count * N, op.dtype, op.reduce, 0});
    cross_->run({OpKind::reduce_scatter, mine, op.output, op.count, op.dtype, op.reduce, 0});
  }

  // Gather across hosts first (each rank sends its own slice once over the network), then
  // inside the host, then put slices in global rank order.
  void allgather(const OpDesc& op) {
    size_t L = h_.local_size, N = h_.nodes, bytes = op.count * dtype_size(op.dtype);
    char* across = scratch(1, N * bytes);
    cross_->run({OpKind::allgather, op.input, across, op.count, op.dtype, op.reduce, 0});
    char* all = scratch(0, L * N * bytes);
    local_->run({OpKind::allgather, across, all, op.count * N, op.dtype, op.reduce, 0});
    char* out = static_cast<char*>(op.output);
    for (size_t l = 0; l < L; ++l)
      for (size_t n = 0; n < N; ++n)
        std::memcpy(out + h_.global_rank[n * L + l] * bytes, all + (l * N + n) * bytes, bytes);
  }

  void broadcast(const OpDesc& op) {
    int where = position_.at(op.root);
    int root_node = where / h_.local_size, root_local = where % h_.local_size;
    if (h_.local == root_local)
      cross_->run({OpKind::broadcast, op.output, op.output, op.count, op.dtype, op.reduce, root_node});
    local_->run({OpKind::broadcast, op.output, op.output, op.count, op.dtype, op.reduce, root_local});
  }

  char* scratch(int which, size_t bytes) {
    auto& s = scratch_[which];
    if (s.size() < bytes) s.resize(bytes);
    return s.data();
  }

  GroupContext context_;
  Hierarchy h_;
  std::unique_ptr<Backend> local_, cross_, flat_;
  std::vector<int> position_;  // global rank -> index into h_.global_rank
  std::vector<char> scratch_[2];
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_hierarchical_backend(const GroupContext& context, Hierarchy layout,
                                                   std::unique_ptr<Backend> local, std::unique_ptr<Backend> cross,
                                                   std::unique_ptr<Backend> flat) {
  return std::make_unique<HierarchicalBackend>(context, std::move(layout), std::move(local), std::move(cross),
                                               std::move(flat));
}

}  // namespace dscpp::comm
