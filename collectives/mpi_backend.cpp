// The OpenMPI engine: each group is its own MPI communicator (a dup of MPI_COMM_WORLD, or an
// MPI_Comm_split of its parent), so groups never share message matching and can progress on
// their own Communicator threads — which is why MPI must provide MPI_THREAD_MULTIPLE.
//
// Failure: MPI has no per-operation timeout. When a peer dies, mpirun (or dscpp's launcher
// wrapping it) sees the process exit and tears the whole job down; until then a blocked call
// simply blocks, and the Communicator's watchdog is what reports the hang and names the
// ranks that are behind. Errors MPI does return (MPI_ERRORS_RETURN on our communicators) become
// dscpp::Error naming the group, the operation and MPI's own text.
#include "build_config.h"
#include "collectives/backend.h"
#include "core/knobs.h"

#if DSCPP_HAVE_MPI
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#endif

namespace dscpp::comm {

#if !DSCPP_HAVE_MPI

std::unique_ptr<Backend> make_mpi_backend(const GroupContext& context) {
  fail(
      "mpi backend for group '{}': this dscpp was built without OpenMPI (install libopenmpi-dev and "
      "reconfigure with -Dmpi=enabled, or choose another backend)",
      context.name);
}

#else

namespace {

// Set once an MPI call failed in communication. MPI_Finalize ends with a fence over all ranks,
// and peers stuck in the failed collective would never reach it; skipping it lets mpirun see an
// exit without finalize and tear the job down instead of leaving every rank hanging.
std::atomic<bool> g_failed{false};

// Argument errors are found by MPI's parameter check before anything is sent, so the group is
// intact and a normal exit (with finalize) is still possible.
bool is_argument_error(int code) {
  int error_class = MPI_ERR_OTHER;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) return false;
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_RANK:
    case MPI_ERR_TAG:
      return true;
  }
  return false;
}

void finalize_at_exit() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (!finalized && !g_failed.load()) MPI_Finalize();
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return std::string(text, static_cast<size_t>(length));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

void ensure_mpi_initialised() {
  static std::once_flag once;
  // call_once retries after a throw, so a failed check is reported again on every attempt.
  std::call_once(once, [] {
    int initialised = 0, finalized = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalized);
    if (finalized) fail("mpi backend: MPI was already finalised in this process; it cannot be started again");
    int provided = MPI_THREAD_SINGLE;
    if (!initialised) {
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) fail("mpi backend: MPI_Init_thread failed: {}", mpi_error_text(rc));
      std::atexit(finalize_at_exit);
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE)
      fail(
          "mpi backend: MPI provides {} but dscpp needs MPI_THREAD_MULTIPLE (every communicator group "
          "runs on its own thread){}",
          thread_level_name(provided),
          initialised ? "; the program initialised MPI itself: call MPI_Init_thread asking for MPI_THREAD_MULTIPLE"
                      : "; use an OpenMPI built with thread support");
  });
}

// fp16/bf16 travel as 16-bit words: MPI has no half types, and only data movement uses them.
MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::i8:
      return MPI_INT8_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;
  }
  invalid_dtype(static_cast<int>(type));
}

bool mpi_reduces(DType type) {
  return type != DType::f16 && type != DType::bf16;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::avg:
      break;
  }
  return MPI_OP_NULL;
}

// Largest element count one MPI call takes (int). DSCPP_MPI_MAX_COUNT lowers it so tests can
// drive the chunked paths with small buffers.
size_t max_count_from_env() {
  size_t limit = INT_MAX;
  if (const char* text = knob("DSCPP_MPI_MAX_COUNT"); text != nullptr && *text != '\0') {
    char* end = nullptr;
    unsigned long long value = std::strtoull(text, &end, 10);
    if (*end != '\0' || value == 0) fail("DSCPP_MPI_MAX_COUNT='{}': expected a positive element count", text);
    limit = std::min<size_t>(limit, value);
  }
  return limit;
}

class MpiBackend final : public Backend {
 public:
  MpiBackend(MPI_Comm comm, GroupContext context, size_t max_count)
      : comm_(comm), context_(std::move(context)), max_count_(max_count) {}

  ~MpiBackend() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return context_.rank; }
  int size() const override { return context_.size; }

  bool supports(DType dtype, ReduceOp op) const override { return op != ReduceOp::avg && mpi_reduces(dtype); }

  void run(const OpDesc& op) override {
    const MPI_Datatype type = mpi_type(op.dtype);
    const size_t elem = dtype_size(op.dtype);
    const auto* in = static_cast<const char*>(op.input);
    auto* out = static_cast<char*>(op.output);
    const size_t n = op.count;
    const size_t me = static_cast<size_t>(context_.rank);
    const size_t ranks = static_cast<size_t>(context_.size);
    if ((op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter) && !supports(op.dtype, op.reduce))
      fail("mpi group '{}': {} with {} on {} is not an MPI reduction; the Communicator stages it", context_.name,
           op_kind_name(op.kind), reduce_op_name(op.reduce), dtype_name(op.dtype));
    const MPI_Op reduce = mpi_op(op.reduce);

    switch (op.kind) {
      case OpKind::allreduce:
        for_chunks(n, big_chunk(elem), [&](size_t off, int len) {
          const void* send = in == out ? MPI_IN_PLACE : in + off * elem;
          check(MPI_Allreduce(send, out + off * elem, len, type, reduce, comm_), op, "MPI_Allreduce");
        });
        break;
      case OpKind::reduce_scatter:
        if (n <= max_count_ && ranks * n * elem <= kLargeBytes) {
          check(MPI_Reduce_scatter_block(in, out, static_cast<int>(n), type, reduce, comm_), op,
                "MPI_Reduce_scatter_block");
          break;
        }
        // A chunk of every slice is strided in the input, so chunks go to their owner one by one.
        for_chunks(n, big_chunk(elem), [&](size_t off, int len) {
          for (size_t r = 0; r < ranks; ++r)
            check(MPI_Reduce(in + (r * n + off) * elem, r == me ? out + off * elem : nullptr, len, type, reduce,
                             static_cast<int>(r), comm_),
                  op, "MPI_Reduce");
        });
        break;
      case OpKind::allgather: {
        const bool in_place = in == out + me * n * elem;
        if (n <= max_count_) {
          check(MPI_Allgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(n), type, out, static_cast<int>(n), type,
                              comm_),
                op, "MPI_Allgather");
          break;
        }
        if (!in_place && n > 0) std::memcpy(out + me * n * elem, in, n * elem);
        for (size_t r = 0; r < ranks; ++r)
          for_chunks(n, [&](size_t off, int len) {
            check(MPI_Bcast(out + (r * n + off) * elem, len, type, static_cast<int>(r), comm_), op, "MPI_Bcast");
          });
        break;
      }
      case OpKind::broadcast:
        for_chunks(n, [&](size_t off, int len) {
          check(MPI_Bcast(out + off * elem, len, type, op.root, comm_), op, "MPI_Bcast");
        });
        break;
      case OpKind::all_to_all:
        if (n <= max_count_) {
          check(MPI_Alltoall(in, static_cast<int>(n), type, out, static_cast<int>(n), type, comm_), op, "MPI_Alltoall");
          break;
        }
        if (n > 0) std::memcpy(out + me * n * elem, in + me * n * elem, n * elem);
        // Pairwise exchange: at step s every rank sends to me+s and receives from me-s.
        for (size_t step = 1; step < ranks; ++step) {
          const size_t to = (me + step) % ranks, from = (me + ranks - step) % ranks;
          for_chunks(n, [&](size_t off, int len) {
            check(MPI_Sendrecv(in + (to * n + off) * elem, len, type, static_cast<int>(to), kAllToAllTag,
                               out + (from * n + off) * elem, len, type, static_cast<int>(from), kAllToAllTag, comm_,
                               MPI_STATUS_IGNORE),
                  op, "MPI_Sendrecv");
          });
        }
        break;
      case OpKind::barrier:
        check(MPI_Barrier(comm_), op, "MPI_Barrier");
        break;
    }
  }

  std::unique_ptr<Backend> split(const SplitPlan& plan) override {
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_, plan.color < 0 ? MPI_UNDEFINED : plan.color, plan.key, &sub);
    if (rc != MPI_SUCCESS) {
      g_failed = true;
      fail("mpi group '{}': MPI_Comm_split for sub-group '{}' (color {}, key {}) failed: {}", context_.name,
           plan.context.name, plan.color, plan.key, mpi_error_text(rc));
    }
    if (sub == MPI_COMM_NULL) {
      if (plan.color >= 0)
        fail("mpi group '{}': MPI_Comm_split left rank {} out of sub-group '{}' although its color is {}",
             context_.name, context_.rank, plan.context.name, plan.color);
      return nullptr;
    }
    if (plan.color < 0)
      fail("mpi group '{}': MPI_Comm_split put a rank with a negative color in a group", context_.name);
    check_members(sub, plan);
    return adopt(sub, plan.context, max_count_);
  }

  // Takes ownership of `comm` (freeing it on error) once MPI agrees with the context.
  static std::unique_ptr<Backend> adopt(MPI_Comm comm, const GroupContext& context, size_t max_count) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int rank = -1, size = -1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (rank != context.rank || size != context.size) {
      MPI_Comm_free(&comm);
      fail(
          "mpi backend for group '{}': dscpp says rank {} of {} but MPI says rank {} of {}; the ranks must come "
          "from the same mpirun job (RANK/WORLD_SIZE disagree with OMPI_COMM_WORLD_RANK/SIZE)",
          context.name, context.rank, context.size, rank, size);
    }
    return std::make_unique<MpiBackend>(comm, context, max_count);
  }

 private:
  static constexpr int kAllToAllTag = 7301;

  // OpenMPI's reductions allocate a temporary as large as the buffer on every call. glibc serves
  // that from a thread's arena only up to its 64 MiB heap size and mmaps anything larger anew
  // each time, so from our progress thread a 64 MiB+ allreduce or reduce_scatter ran at half
  // the speed of the same call from main (measured with bench_collectives). Pieces of 16 MiB
  // stay in the arena; reduce_scatter by per-root MPI_Reduce pieces was also 1.5x faster than
  // MPI_Reduce_scatter_block at 64-256 MiB on 2 ranks.
  static constexpr size_t kChunkBytes = size_t{16} << 20;
  static constexpr size_t kLargeBytes = size_t{32} << 20;
  size_t big_chunk(size_t elem) const { return std::min(max_count_, std::max<size_t>(1, kChunkBytes / elem)); }

  template <typename F>
  void for_chunks(size_t count, F&& body) {
    for_chunks(count, max_count_, std::forward<F>(body));
  }
  template <typename F>
  void for_chunks(size_t count, size_t limit, F&& body) {
    if (count == 0) {
      body(0, 0);  // still collective: every rank must take part, even with nothing to move
      return;
    }
    for (size_t off = 0; off < count; off += limit) body(off, static_cast<int>(std::min(limit, count - off)));
  }

  void check(int rc, const OpDesc& op, const char* call) {
    if (rc == MPI_SUCCESS) return;
    if (!is_argument_error(rc)) g_failed = true;
    fail("mpi group '{}' (rank {} of {}): {} of {} {} failed in {}: {}", context_.name, context_.rank, context_.size,
         op_kind_name(op.kind), op.count, dtype_name(op.dtype), call, mpi_error_text(rc));
  }

  // The Communicator ordered the sub-group by (key, parent rank) as MPI does; say so if not.
  void check_members(MPI_Comm sub, const SplitPlan& plan) {
    int size = 0;
    MPI_Comm_size(sub, &size);
    MPI_Group parent_group, sub_group;
    MPI_Comm_group(comm_, &parent_group);
    MPI_Comm_group(sub, &sub_group);
    std::vector<int> sub_ranks(static_cast<size_t>(size)), parent_ranks(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) sub_ranks[static_cast<size_t>(i)] = i;
    MPI_Group_translate_ranks(sub_group, size, sub_ranks.data(), parent_group, parent_ranks.data());
    MPI_Group_free(&sub_group);
    MPI_Group_free(&parent_group);
    if (!plan.members.empty() && parent_ranks != plan.members) {
      MPI_Comm_free(&sub);
      fail("mpi group '{}': sub-group '{}' should hold parent ranks [{}] in that order, MPI_Comm_split made [{}]",
           context_.name, plan.context.name, fmt::join(plan.members, ", "), fmt::join(parent_ranks, ", "));
    }
  }

  MPI_Comm comm_;
  GroupContext context_;
  size_t max_count_;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const GroupContext& context) {
  ensure_mpi_initialised();
  const size_t max_count = max_count_from_env();
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) fail("mpi backend for group '{}': MPI_Comm_dup failed: {}", context.name, mpi_error_text(rc));
  return MpiBackend::adopt(comm, context, max_count);
}

#endif

}  // namespace dscpp::comm
