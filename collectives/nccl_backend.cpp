// The NCCL engine: buffers live on context.device, collectives run on a dedicated stream of
// that device, and run() blocks until the stream drained. With context.cuda_compute_stream set,
// each operation's stream first waits (on the device, through one reused event) for the work
// enqueued on that producer stream, so a collective never reads buffers that kernels still write.
//
// Communicators are created non-blocking (ncclConfig_t.blocking = 0) so that nothing NCCL does
// can wait forever: initialisation, every enqueue and the wait for the stream all poll
// ncclCommGetAsyncError against the group's deadline, and on an asynchronous error (a peer
// died, a network failure) or on the timeout the communicator is aborted — which releases the
// kernels spinning on the stream — and dscpp::Error names the group and the operation. An
// aborted backend refuses further work; the Communicator reports the hang forensics.
#include "build_config.h"
#include "collectives/backend.h"

#if DSCPP_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#endif

namespace dscpp::comm {

#if !DSCPP_HAVE_NCCL

std::unique_ptr<Backend> make_nccl_backend(const GroupContext& context) {
  fail(
      "nccl backend for group '{}': this dscpp was built without NCCL (it needs the CUDA toolkit and "
      "libnccl under -Dnv_toolkit_dir; reconfigure, or choose another backend)",
      context.name);
}

#else

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
  }
  invalid_dtype(static_cast<int>(type));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

void check_cuda(cudaError_t rc, const std::string& group, std::string_view what) {
  if (rc != cudaSuccess)
    fail("nccl group '{}': {} failed: {} ({})", group, what, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(GroupContext context, int device) : context_(std::move(context)), device_(device) {}

  ~NcclBackend() override {
    // Destroying waits for outstanding work; an aborted communicator is already gone.
    if (comm_ != nullptr && !aborted_) ncclCommDestroy(comm_);
    if (device_ >= 0) cudaSetDevice(device_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (control_ != nullptr) cudaFree(control_);
    if (producer_done_ != nullptr) cudaEventDestroy(producer_done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Allocates the stream, the barrier word and the producer event; the communicator is created
  // by the caller.
  void prepare() {
    check_cuda(cudaSetDevice(device_), context_.name, fmt::format("cudaSetDevice({})", device_));
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), context_.name, "cudaStreamCreate");
    check_cuda(cudaMalloc(&scratch_, sizeof(float)), context_.name, "cudaMalloc of the barrier word");
    if (context_.cuda_compute_stream != nullptr)  // timing off: the cheapest event to record and wait on
      check_cuda(cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming), context_.name,
                 "cudaEventCreate for the compute stream");
  }

  void init_from_store() {
    ncclUniqueId id;
    const std::string key = "nccl_unique_id";
    if (context_.rank == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", "init");
      context_.store->set(key, std::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
    } else {
      std::string bytes = context_.store->get(key, context_.timeout);
      if (bytes.size() != sizeof(id))
        fail(
            "nccl group '{}': the unique id in the store has {} bytes, expected {} (a different NCCL version on rank "
            "0?)",
            context_.name, bytes.size(), sizeof(id));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    ncclConfig_t config = nonblocking_config();
    ncclComm_t comm = nullptr;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, context_.size, id, context_.rank, &config);
    comm_ = comm;
    if (rc != ncclInProgress) nccl_check(rc, "ncclCommInitRankConfig", "init");
    settle(deadline(), "init", "ncclCommInitRankConfig");
  }

  void adopt_split(ncclComm_t comm) {
    comm_ = comm;
    settle(deadline(), "split", "ncclCommSplit");
  }

  std::string_view name() const override { return "nccl"; }
  int rank() const override { return context_.rank; }
  int size() const override { return context_.size; }
  bool supports(DType, ReduceOp) const override { return true; }
  Memory memory() const override { return Memory::device; }

  void run(const OpDesc& op) override {
    const std::string_view what = op_kind_name(op.kind);
    if (aborted_)
      fail("nccl group '{}': {} after the communicator was aborted by an earlier failure", context_.name, what);
    check_cuda(cudaSetDevice(device_), context_.name, fmt::format("cudaSetDevice({})", device_));
    wait_for_producer(what);
    const auto until = deadline();
    const ncclDataType_t type = nccl_type(op.dtype);
    const size_t elem = dtype_size(op.dtype);
    const size_t n = op.count;
    auto* out = static_cast<char*>(op.output);
    const auto* in = static_cast<const char*>(op.input);

    switch (op.kind) {
      case OpKind::allreduce:
        enqueue(ncclAllReduce(op.input, op.output, n, type, nccl_op(op.reduce), comm_, stream_), until, what,
                "ncclAllReduce");
        break;
      case OpKind::reduce_scatter:
        enqueue(ncclReduceScatter(op.input, op.output, n, type, nccl_op(op.reduce), comm_, stream_), until, what,
                "ncclReduceScatter");
        break;
      case OpKind::allgather:
        enqueue(ncclAllGather(op.input, op.output, n, type, comm_, stream_), until, what, "ncclAllGather");
        break;
      case OpKind::broadcast:
        enqueue(ncclBroadcast(op.input, op.output, n, type, op.root, comm_, stream_), until, what, "ncclBroadcast");
        break;
      case OpKind::all_to_all: {
        const size_t slice = n * elem;
        enqueue(ncclGroupStart(), until, what, "ncclGroupStart");
        for (int peer = 0; peer < context_.size; ++peer) {
          const size_t p = static_cast<size_t>(peer);
          ncclResult_t rc = ncclSend(in + p * slice, n, type, peer, comm_, stream_);
          if (rc == ncclSuccess || rc == ncclInProgress) rc = ncclRecv(out + p * slice, n, type, peer, comm_, stream_);
          if (rc != ncclSuccess && rc != ncclInProgress) {
            ncclGroupEnd();
            nccl_check(rc, "ncclSend/ncclRecv", what);
          }
        }
        enqueue(ncclGroupEnd(), until, what, "ncclGroupEnd");
        break;
      }
      case OpKind::barrier:
        enqueue(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), until, what,
                "ncclAllReduce (barrier)");
        break;
    }
    wait_stream(until, what);
  }

  // NCCL moves device memory only: stage the host bytes through a device buffer, on the
  // operations' stream so that the copies are ordered with the allgather.
  void allgather_host(const void* input, void* output, size_t bytes) override {
    check_cuda(cudaSetDevice(device_), context_.name, fmt::format("cudaSetDevice({})", device_));
    const size_t total = bytes * (static_cast<size_t>(context_.size) + 1);
    if (control_bytes_ < total) {
      if (control_ != nullptr) cudaFree(control_);
      control_ = nullptr;
      control_bytes_ = 0;
      check_cuda(cudaMalloc(&control_, total), context_.name, "cudaMalloc of the schedule check buffer");
      control_bytes_ = total;
    }
    char* device = static_cast<char*>(control_);
    check_cuda(cudaMemcpyAsync(device, input, bytes, cudaMemcpyHostToDevice, stream_), context_.name,
               "copying the schedule signature to the device");
    run({OpKind::allgather, device, device + bytes, bytes, DType::u8});
    check_cuda(cudaMemcpyAsync(output, device + bytes, bytes * static_cast<size_t>(context_.size),
                               cudaMemcpyDeviceToHost, stream_),
               context_.name, "copying the schedule signatures to the host");
    wait_stream(deadline(), "schedule check");
  }

  std::unique_ptr<Backend> split(const SplitPlan& plan) override {
    if (aborted_) fail("nccl group '{}': split after the communicator was aborted", context_.name);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    check_cuda(cudaSetDevice(device_), context_.name, fmt::format("cudaSetDevice({})", device_));
    ncclConfig_t config = nonblocking_config();
    ncclComm_t sub = nullptr;
    ncclResult_t rc = ncclCommSplit(comm_, plan.color < 0 ? NCCL_SPLIT_NOCOLOR : plan.color, plan.key, &sub, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) nccl_check(rc, "ncclCommSplit", "split");
    // The split is collective over the parent: finish it there before looking at the child.
    settle(deadline(), "split", "ncclCommSplit");
    if (plan.color < 0 || sub == nullptr) return nullptr;
    GroupContext context = plan.context;
    context.device = device_;
    context.cuda_compute_stream = context_.cuda_compute_stream;
    auto child = std::make_unique<NcclBackend>(std::move(context), device_);
    child->prepare();
    child->adopt_split(sub);
    int rank = -1, size = -1;
    child->nccl_check(ncclCommUserRank(sub, &rank), "ncclCommUserRank", "split");
    child->nccl_check(ncclCommCount(sub, &size), "ncclCommCount", "split");
    if (rank != plan.context.rank || size != plan.context.size)
      fail("nccl group '{}': sub-group '{}' should make this rank {} of {}, ncclCommSplit made it {} of {}",
           context_.name, plan.context.name, plan.context.rank, plan.context.size, rank, size);
    return child;
#else
    fail("nccl group '{}': splitting into '{}' needs NCCL >= 2.18 (ncclCommSplit); this build has {}", context_.name,
         plan.context.name, NCCL_VERSION_CODE);
#endif
  }

 private:
  Clock::time_point deadline() const {
    return Clock::now() + context_.timeout;
  }

  void nccl_check(ncclResult_t rc, std::string_view call, std::string_view what) {
    if (rc == ncclSuccess) return;
    const char* detail = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    fail("nccl group '{}' (rank {} of {}): {} failed in {}: {}{}{}", context_.name, context_.rank, context_.size, what,
         call, ncclGetErrorString(rc), detail != nullptr && *detail != '\0' ? " — " : "", detail ? detail : "");
  }

  [[noreturn]] void abort_and_fail(std::string_view what, const std::string& reason) {
    const char* detail = ncclGetLastError(comm_);
    std::string last = detail != nullptr && *detail != '\0' ? fmt::format(" (NCCL: {})", detail) : "";
    ncclCommAbort(comm_);
    aborted_ = true;
    fail("nccl group '{}' (rank {} of {}): {} {}{}; the communicator was aborted", context_.name, context_.rank,
         context_.size, what, reason, last);
  }

  // A non-blocking communicator may answer ncclInProgress; no further call is allowed on it
  // until the async state says otherwise.
  void settle(Clock::time_point until, std::string_view what, std::string_view call) {
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
      if (rc != ncclSuccess) abort_and_fail(what, fmt::format("ncclCommGetAsyncError: {}", ncclGetErrorString(rc)));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) abort_and_fail(what, fmt::format("{}: {}", call, ncclGetErrorString(state)));
      if (Clock::now() > until)
        abort_and_fail(what, fmt::format("{} did not complete within {:.1f} s", call, timeout_s()));
      pause(spins);
    }
  }

  // The event is re-recorded per operation: a stream wait binds to the recording made before
  // it, so one event serves every operation of this backend in turn.
  void wait_for_producer(std::string_view what) {
    if (producer_done_ == nullptr) return;
    auto* producer = static_cast<cudaStream_t>(context_.cuda_compute_stream);
    check_cuda(cudaEventRecord(producer_done_, producer), context_.name,
               fmt::format("{}: recording an event on the compute stream", what));
    check_cuda(cudaStreamWaitEvent(stream_, producer_done_, 0), context_.name,
               fmt::format("{}: making the nccl stream wait for the compute stream", what));
  }

  void enqueue(ncclResult_t rc, Clock::time_point until, std::string_view what, std::string_view call) {
    if (rc == ncclInProgress) return settle(until, what, call);
    if (rc != ncclSuccess) abort_and_fail(what, fmt::format("{}: {}", call, ncclGetErrorString(rc)));
  }

  void wait_stream(Clock::time_point until, std::string_view what) {
    for (int spins = 0;; ++spins) {
      cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady)
        abort_and_fail(what,
                       fmt::format("the stream failed: {} ({})", cudaGetErrorString(state), cudaGetErrorName(state)));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        abort_and_fail(what, fmt::format("hit an asynchronous NCCL error: {}", ncclGetErrorString(async)));
      if (Clock::now() > until)
        abort_and_fail(what, fmt::format("did not finish within the group timeout of {:.1f} s", timeout_s()));
      pause(spins);
    }
  }

  // Spin briefly for small collectives' latency, then stop burning the core.
  static void pause(int spins) {
    if (spins < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  double timeout_s() const {
    return std::chrono::duration<double>(context_.timeout).count();
  }

  GroupContext context_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_done_ = nullptr;  // set when context_.cuda_compute_stream is
  void* scratch_ = nullptr;
  void* control_ = nullptr;  // device staging for allgather_host
  size_t control_bytes_ = 0;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const GroupContext& context) {
  if (!context.store) fail("nccl backend for group '{}': no store to exchange the NCCL unique id", context.name);
  int device = context.device;
  if (device < 0) check_cuda(cudaGetDevice(&device), context.name, "cudaGetDevice");
  auto backend = std::make_unique<NcclBackend>(context, device);
  backend->prepare();
  backend->init_from_store();
  return backend;
}

#endif

}  // namespace dscpp::comm
