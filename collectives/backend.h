// What an engine (shm, gloo, mpi, nccl) implements for the Communicator. Backends are
// synchronous and single-threaded: the Communicator calls run() from its one progress thread,
// in submission order, and layers async handles, dtype staging, averaging, sequence numbers
// and hang forensics on top, once for all engines.
#pragma once

#include "collectives/store.h"
#include "core/dtype.h"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp {
class Device;
}

namespace dscpp::comm {

enum class ReduceOp : uint8_t { sum, avg, max, min };
std::string_view reduce_op_name(ReduceOp op);

enum class OpKind : uint8_t { allreduce, reduce_scatter, allgather, broadcast, barrier, all_to_all };
std::string_view op_kind_name(OpKind kind);

// One collective call. `count` is per rank slice for reduce_scatter, allgather and all_to_all,
// and the whole buffer for allreduce and broadcast (both in place: output == input).
//   reduce_scatter: input  size*count, output count  = reduction of every rank's slice [rank]
//   allgather:      input  count,      output size*count, slice r = rank r's input
//   all_to_all:     input  size*count, output size*count, output slice r = rank r's input slice [me]
// Input and output never overlap except in place (allreduce, broadcast) and for allgather
// with input == output + rank*count.
struct OpDesc {
  OpKind kind = OpKind::barrier;
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
};

// Bytes this rank puts on the wire for `op` on `size` ranks with the usual ring/tree
// algorithms: what the comms log and ZeRO++ byte accounting report.
size_t wire_bytes(const OpDesc& op, int size);

// What a backend needs to come up: its group, a store namespaced for the group, and the
// timeout after which a blocked operation must give up.
struct GroupContext {
  std::shared_ptr<Store> store;  // already prefixed for this group
  int rank = 0;
  int size = 1;
  std::string name = "world";    // "world", "node", "cross", "split3", ... for messages
  Millis timeout{std::chrono::minutes(30)};
  std::string address = "127.0.0.1";  // this rank's reachable address (for TCP engines)
  int device = -1;                    // CUDA device ordinal for nccl
  // The cudaStream_t (void* keeps this header CUDA-free) on which the kernels that write the
  // collectives' buffers run; nullptr: none. NCCL runs on a stream of its own, so without this
  // nothing orders a collective after the compute work still in flight on its buffers: the
  // nccl engine makes its stream wait for everything enqueued here when each operation starts
  // (one event, no host block). Sub-groups made by split inherit it. Other engines ignore it:
  // they read host memory, which no stream writes behind the caller's back.
  void* cuda_compute_stream = nullptr;
  // The device whose memory an operation's buffers may be in (nullptr, or a host device: every
  // buffer is host memory), and the host memory to stage them through (pinned beside a GPU).
  // The Communicator finds each buffer's place with Device::holds and stages what the engine
  // cannot reach (Backend::memory) through one bounded area, reused, with the device's own
  // copies, which run on its compute stream and so after the kernels that wrote the buffers.
  Device* device_memory = nullptr;
  Device* host_memory = nullptr;
  size_t staging_bytes = size_t(32) << 20;  // the area's bound; larger operations go in pieces
};

// Where an engine reads and writes the buffers handed to run().
enum class Memory : uint8_t { host, device, either };

// A sub-group to create, decided collectively by the Communicator before calling split():
// every rank of the parent is called, members with their new rank, others with new_rank -1.
struct SplitPlan {
  int color = 0;                // negative: this rank joins no sub-group
  int key = 0;
  std::vector<int> members;     // parent ranks of this rank's sub-group, in new-rank order
  GroupContext context;         // rank/size/name/store for the sub-group (when member)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether run() reduces `dtype` with `op` itself. Otherwise the Communicator stages
  // through fp32 (fp16/bf16) or turns avg into sum and a scale. Data movement (allgather,
  // broadcast, all_to_all) must work for every dtype. f32 sum/max/min is mandatory.
  virtual bool supports(DType dtype, ReduceOp op) const = 0;
  // Host memory (shm, gloo, mpi), device memory (nccl), or either (the one-rank group, which
  // only copies). The Communicator stages buffers that are elsewhere.
  virtual Memory memory() const { return Memory::host; }
  // Blocking. Throws dscpp::Error when a peer is gone or the group timeout passes.
  virtual void run(const OpDesc& op) = 0;
  // Allgather of `bytes` bytes per rank that live in host memory: the Communicator's own
  // control data (the schedule check). Engines whose buffers live elsewhere (nccl) or that
  // compose other engines (hierarchical) override it.
  virtual void allgather_host(const void* input, void* output, size_t bytes) {
    run({OpKind::allgather, input, output, bytes, DType::u8});
  }
  // Collective over the parent: called on every parent rank with that rank's plan;
  // returns nullptr on ranks with color < 0.
  virtual std::unique_ptr<Backend> split(const SplitPlan& plan) = 0;
};

std::unique_ptr<Backend> make_shm_backend(const GroupContext& context);
std::unique_ptr<Backend> make_gloo_backend(const GroupContext& context);
// MPI_COMM_WORLD; MPI is initialised on first use. context.rank/size must match MPI's.
std::unique_ptr<Backend> make_mpi_backend(const GroupContext& context);
std::unique_ptr<Backend> make_nccl_backend(const GroupContext& context);
// The trivial group of one rank: reductions are copies. Lets every group size take one path.
std::unique_ptr<Backend> make_self_backend(const GroupContext& context);

// Where every rank of a world sits: node-major table of global ranks, uniform ranks per node.
struct Hierarchy {
  int node = 0, nodes = 1, local = 0, local_size = 1;
  std::vector<int> global_rank;  // [n * local_size + l] = global rank of local rank l on node n
};
// Shared memory inside each host (`local`, ranks of this node ordered by local index), an
// engine between hosts (`cross`, the ranks with this local index, ordered by node) and the
// same engine over the whole world (`flat`) for what does not decompose (all_to_all, split).
std::unique_ptr<Backend> make_hierarchical_backend(const GroupContext& context, Hierarchy layout,
                                                   std::unique_ptr<Backend> local, std::unique_ptr<Backend> cross,
                                                   std::unique_ptr<Backend> flat);

}  // namespace dscpp::comm
