// The Communicator: every byte the runtime moves between ranks goes through one of these.
//
// Semantics (see OpDesc in backend.h for buffer shapes):
//   allreduce       in place, sum | avg | max | min
//   reduce_scatter  input of size()*count elements (callers pad), rank r receives the
//                   reduction of slice r
//   allgather       count elements from every rank into one flat size()*count buffer;
//                   in place when input is output + rank()*count (every engine; the
//                   communicator tests check it, stage 3's offloaded gathers rely on it)
//   broadcast       in place from `root`
//   all_to_all      slice j of the input goes to rank j; output slice i came from rank i
//   barrier
// on fp32, fp16 and bf16 (and fp64 / integer types where the engine has them). fp16/bf16
// reductions are computed in fp32 and rounded once, whatever the engine.
//
// Ordering: every rank of a group must issue the same operations in the same order (as with
// NCCL and MPI). Operations of one Communicator run one at a time in issue order on its
// progress thread, so an async operation issued before a synchronous one has finished when
// the synchronous one returns. Buffers of an async operation belong to the Communicator until
// wait() returns. Different Communicators (sub-groups) progress independently.
//
// Device buffers: with CommOptions::device_memory set, a buffer may be host memory or that
// device's memory, on every engine. nccl takes device buffers directly: an operation runs on the
// engine's own CUDA stream and starts after the work enqueued on CommOptions::cuda_compute_stream
// when that is set (otherwise the caller must synchronize its device before handing over buffers
// that kernels are still writing). The host engines (shm, gloo, mpi, hierarchical) get device
// buffers, and nccl host buffers, staged through one bounded area per group
// (collectives/memory_staging.h) by the device's own copies, which follow its compute stream. A
// one-rank group copies device data on the device. wait() returns once the results are in place,
// so compute issued after it sees them.
//
// Failure: an operation that cannot finish within the group's timeout (a peer died, or is
// stuck or behind) fails with dscpp::Error on every rank that waits for it; the message names
// the ranks that are behind and the last operation they finished (collectives/flight_recorder.h).
//
// Schedule check (debugging): with set_schedule_check(true) on every rank, the ranks compare a
// signature of each operation before running it and all fail at once, naming the first
// difference, instead of deadlocking; collectives/schedule_check.h has what it can and cannot see.
#pragma once

#include "collectives/backend.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::comm {

// The record kept for each of a rank's recent operations.
struct OpRecord {
  uint64_t seq = 0;  // 1-based, per communicator
  OpKind kind = OpKind::barrier;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  size_t bytes = 0;  // payload bytes of this rank's buffer
  double start_s = 0, end_s = 0;  // seconds since the communicator was created; end 0 = running
};

struct CommStats {
  uint64_t ops = 0;
  uint64_t payload_bytes = 0;  // bytes of the buffers handed in
  uint64_t wire_bytes = 0;     // bytes this rank sent, by the algorithm's count (backend.h)
  double busy_s = 0;           // time the progress thread spent inside the engine
  // wire_bytes by OpKind (ZeRO++ and communication_data_type claims are about one kind).
  std::array<uint64_t, 6> wire_bytes_by_kind{};
};

// "12 collectives, wire_bytes=4096 sent, 0.1 s in the engine (allgather 1024, reduce_scatter 3072)".
std::string format_traffic(const CommStats& stats);

class ScheduleCheck;                   // collectives/schedule_check.h
class MemoryStaging;                   // collectives/memory_staging.h
class FlightRecorder;                  // collectives/flight_recorder.h
enum class ScheduleMark : uint8_t;

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation finished; rethrows its error. Idempotent.
  virtual void wait() = 0;
  virtual bool done() const = 0;
};
using WorkHandle = std::shared_ptr<Work>;

class Communicator {
 public:
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return context_.rank; }
  int size() const { return context_.size; }
  const std::string& group_name() const { return context_.name; }
  std::string_view backend_name() const { return backend_->name(); }

  void allreduce(void* buffer, size_t count, DType dtype, ReduceOp op = ReduceOp::sum) {
    allreduce_async(buffer, count, dtype, op)->wait();
  }
  void reduce_scatter(const void* input, void* output, size_t count, DType dtype, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(input, output, count, dtype, op)->wait();
  }
  void allgather(const void* input, void* output, size_t count, DType dtype) {
    allgather_async(input, output, count, dtype)->wait();
  }
  void broadcast(void* buffer, size_t count, DType dtype, int root) {
    broadcast_async(buffer, count, dtype, root)->wait();
  }
  void all_to_all(const void* input, void* output, size_t count, DType dtype) {
    all_to_all_async(input, output, count, dtype)->wait();
  }
  void barrier() { barrier_async()->wait(); }

  WorkHandle allreduce_async(void* buffer, size_t count, DType dtype, ReduceOp op = ReduceOp::sum);
  WorkHandle reduce_scatter_async(const void* input, void* output, size_t count, DType dtype,
                                  ReduceOp op = ReduceOp::sum);
  WorkHandle allgather_async(const void* input, void* output, size_t count, DType dtype);
  WorkHandle broadcast_async(void* buffer, size_t count, DType dtype, int root);
  WorkHandle all_to_all_async(const void* input, void* output, size_t count, DType dtype);
  WorkHandle barrier_async();

  // Collective: ranks with the same color form a group ordered by (key, rank). Returns
  // nullptr on ranks passing a negative color. The child checks its schedule when this does.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name);

  // Schedule check. Every rank must turn it on or off at the same point of its schedule
  // (create_world does it for all from CommOptions::check_schedule); it applies to operations
  // issued after the call. With it on, a divergence makes every operation from the first
  // differing one on fail with the same dscpp::Error on every rank.
  void set_schedule_check(bool on);
  bool schedule_check() const;
  // Labels the operations issued from now on ("zero3 gather layer 7"): compared between ranks
  // like the rest of the signature, so it must be the same on every rank at the same point, and
  // named in the message. Up to 87 bytes count. Only used while checking is on.
  void set_schedule_label(std::string_view label);
  // A step boundary ("end of step 3"). With checking on, the ranks compare it like an
  // operation, so a rank that ends a step early meets a rank still issuing collectives and both
  // fail with a message naming each side; it returns when every rank reached it (and every
  // operation issued before it has finished). With checking off it does nothing.
  void schedule_checkpoint(std::string_view label);

  CommStats stats() const;
  // Called on the progress thread when a collective finished without error (not for splits
  // or schedule marks), with the times it entered and left the engine, before its wait()
  // returns; applies to operations that finish after the call. Empty: none (comms_logger).
  using OpObserver = std::function<void(const OpRecord&)>;
  void set_op_observer(OpObserver observer);
  // The last operations (oldest first), up to FlightRecorder::kRing.
  std::vector<OpRecord> recent_ops() const;

  // Used by the factory; not for callers.
  Communicator(GroupContext context, std::unique_ptr<Backend> backend);

 private:
  struct Queue;
  WorkHandle submit(const OpDesc& op);
  // Runs `body` (a split's engine part) or a schedule mark on the progress thread, behind every
  // operation issued so far, and waits for it.
  void run_control(std::function<void()> body, std::optional<ScheduleMark> mark, std::string_view label);
  void run_staged(const OpDesc& op);
  void run_on_engine(const OpDesc& op);
  // `what` names a task that is not a recorded operation (a schedule checkpoint).
  [[noreturn]] void hung(uint64_t seq, double waited_s, const std::string& what = {});

  GroupContext context_;
  std::unique_ptr<Backend> backend_;
  // A pointer so that a hung engine's thread, abandoned with it, keeps a live recorder.
  std::unique_ptr<FlightRecorder> recorder_;
  std::unique_ptr<Queue> queue_;
  std::unique_ptr<ScheduleCheck> schedule_;
  std::vector<float> staging_;  // fp32 copies of fp16/bf16 buffers for engines without them
  std::unique_ptr<MemoryStaging> memory_staging_;  // set when buffers may be in device memory
  uint64_t splits_ = 0;
};

enum class BackendChoice { automatic, shm, gloo, mpi, nccl, hierarchical };
BackendChoice parse_backend_choice(std::string_view name);  // throws Error listing the choices

struct CommOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  BackendChoice backend = BackendChoice::automatic;
  bool cuda_device = false;      // buffers live on a CUDA device (→ nccl)
  // With cuda_device: the runtime's compute stream (CudaDevice::compute_stream(), a
  // cudaStream_t). Every NCCL collective of the world and of its sub-groups then starts after
  // the work enqueued on it before the operation runs, so the runtime need not synchronize the
  // device before reducing what its kernels wrote (GroupContext::cuda_compute_stream).
  void* cuda_compute_stream = nullptr;
  int device = -1;
  // The GPU this rank uses, the same string for ranks on the same one (its PCI bus id): nccl
  // refuses two ranks on one GPU, so create_world says so first, with the remedy. Empty: none.
  std::string device_identity;
  // Where buffers may live (GroupContext::device_memory / host_memory): the rank's training
  // device and the host memory beside it. Unset: every buffer is host memory.
  Device* device_memory = nullptr;
  Device* host_memory = nullptr;
  size_t staging_bytes = size_t(32) << 20;  // each group's staging area at most (DSCPP_COMM_STAGING_BYTES)
  bool started_by_mpi = false;   // OMPI_* / PMIx variables present (→ mpi between hosts)
  int ranks_per_node = 0;        // 0: group ranks by host name; >0 forces node = rank / n
  Millis timeout{std::chrono::minutes(30)};
  Millis connect_timeout{std::chrono::seconds(300)};
  bool check_schedule = false;   // compare every operation across ranks (schedule_check.h)
  // The rendezvous store's security (docs/security.md), read only for worlds of several ranks:
  // the job's secret (DSCPP_JOB_SECRET or DSCPP_JOB_SECRET_FILE), without which create_world
  // refuses to host or join the store unless insecure_store (DSCPP_INSECURE_STORE=1); and the
  // address rank 0 listens on ("" = MASTER_ADDR's; DSCPP_STORE_BIND).
  std::string job_secret;
  bool insecure_store = false;
  std::string store_bind;
};

// The world of a job plus its node-local and cross-node groups, and the store that made them.
struct World {
  std::shared_ptr<Store> store;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> node;   // ranks on this host
  std::unique_ptr<Communicator> cross;  // ranks with this rank's local index on every host
  int node_index = 0, node_count = 1, local_rank = 0, local_size = 1;
  std::string description;  // "hierarchical(shm x2, gloo x2) over 2 hosts", for the start-up log
};

// Connects to (or, on rank 0, hosts) the store, finds which ranks share a host, picks the
// backend (explicit choice, else: nccl for CUDA buffers; shm on one host; shm inside hosts +
// mpi (when started by mpirun/srun) or gloo between hosts) and builds the groups.
World create_world(const CommOptions& options);

// The world store's reply timeout for a group timeout: half of it, within 2-60 s. A stalled
// store host then costs a hang report one such wait, and the exit at most another (the
// progress publisher's call in flight), so a job whose rank 0 stops ends within
// timeout + 2 × this + ~5 s of forensics (docs/reliability.md).
Millis store_reply_timeout(Millis group_timeout);

// Reads CommOptions from the environment a launcher leaves (RANK/WORLD_SIZE/MASTER_ADDR/
// MASTER_PORT and the OMPI_/SLURM_/PMI_ equivalents via core/rank_discovery.h, plus
// DSCPP_COMM_BACKEND, DSCPP_COMM_TIMEOUT and DSCPP_RENDEZVOUS_TIMEOUT seconds, DSCPP_RANKS_PER_NODE,
// DSCPP_CHECK_SCHEDULE=1|0, DSCPP_COMM_STAGING_BYTES).
CommOptions comm_options_from_env();

}  // namespace dscpp::comm
