#include "collectives/communicator.h"

#include "collectives/flight_recorder.h"
#include "collectives/memory_staging.h"
#include "collectives/schedule_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace dscpp::comm {

using Clock = std::chrono::steady_clock;

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::allreduce: return "allreduce";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::allgather: return "allgather";
    case OpKind::broadcast: return "broadcast";
    case OpKind::barrier: return "barrier";
    case OpKind::all_to_all: return "all_to_all";
  }
  return "?";
}

static size_t payload_bytes(const OpDesc& op, int size) {
  size_t elem = op.count * dtype_size(op.dtype);
  switch (op.kind) {
    case OpKind::allreduce:
    case OpKind::broadcast: return elem;
    case OpKind::reduce_scatter:
    case OpKind::allgather:
    case OpKind::all_to_all: return elem * size;
    case OpKind::barrier: return 0;
  }
  return 0;
}

std::string format_traffic(const CommStats& c) {
  std::string kinds;
  for (size_t k = 0; k < c.wire_bytes_by_kind.size(); ++k)
    if (c.wire_bytes_by_kind[k] > 0)
      kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", op_kind_name(static_cast<OpKind>(k)),
                           c.wire_bytes_by_kind[k]);
  return fmt::format("{} collectives, wire_bytes={} sent, {:.1f} s in the engine ({})", c.ops, c.wire_bytes, c.busy_s,
                     kinds.empty() ? "nothing sent" : kinds);
}

// nccl-tests' bus-bandwidth factors: what a ring or pairwise algorithm sends per rank.
size_t wire_bytes(const OpDesc& op, int size) {
  if (size <= 1) return 0;
  double bytes = static_cast<double>(payload_bytes(op, size));
  double n = size;
  switch (op.kind) {
    case OpKind::allreduce: return static_cast<size_t>(bytes * 2 * (n - 1) / n);
    case OpKind::reduce_scatter:
    case OpKind::allgather:
    case OpKind::all_to_all: return static_cast<size_t>(bytes * (n - 1) / n);
    case OpKind::broadcast: return static_cast<size_t>(bytes);
    case OpKind::barrier: return 0;
  }
  return 0;
}

namespace {

struct Task {
  uint64_t seq = 0;
  OpDesc op;
  std::function<void()> body;  // set for non-collective tasks (split)
  bool mark = false;           // a schedule mark: the check below is all there is to run
  std::string what;            // a mark's name in hang reports
  std::optional<ScheduleEntry> check;  // set when the schedule check was on at issue
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
  std::atomic<bool> reporting{false};  // the progress thread is writing this task's hang report
};

}  // namespace

// The progress thread and the operations waiting for it.
struct Communicator::Queue {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::shared_ptr<Task>> pending;
  bool stopping = false;
  uint64_t next_seq = 0;
  CommStats stats;
  OpObserver observer;  // written under `mutex`
  std::atomic<bool> wedged{false};  // a hang was reported: the engine may never return
  std::atomic<bool> checking{false};  // the schedule check; written under `mutex`
  std::thread worker;
};

namespace {

class TaskWork final : public Work {
 public:
  TaskWork(std::shared_ptr<Task> task, std::function<void(uint64_t, double)> on_timeout, Millis timeout)
      : task_(std::move(task)), on_timeout_(std::move(on_timeout)), timeout_(timeout) {}

  void wait() override {
    std::unique_lock lock(task_->mutex);
    // The engine enforces the group timeout itself where it can (gloo, shm); this deadline
    // catches engines that cannot (MPI, a peer stuck outside communication) a little later.
    auto grace = std::max(Millis(5000), timeout_ / 10);
    auto start = Clock::now();
    if (!task_->finished.wait_for(lock, timeout_ + grace, [&] { return task_->done; })) {
      // The engine gave up and the progress thread is writing the hang report (whose store
      // calls are bounded): that report is the answer, not a second one started here.
      if (!task_->reporting ||
          !task_->finished.wait_for(lock, FlightRecorder::kReportBound, [&] { return task_->done; })) {
        lock.unlock();
        on_timeout_(task_->seq, std::chrono::duration<double>(Clock::now() - start).count());
      }
    }
    if (task_->error) std::rethrow_exception(task_->error);
  }

  bool done() const override {
    std::lock_guard lock(task_->mutex);
    return task_->done;
  }

 private:
  std::shared_ptr<Task> task_;
  std::function<void(uint64_t, double)> on_timeout_;
  Millis timeout_;
};

}  // namespace

Communicator::Communicator(GroupContext context, std::unique_ptr<Backend> backend)
    : context_(std::move(context)),
      backend_(std::move(backend)),
      recorder_(std::make_unique<FlightRecorder>(context_, backend_->name())),
      queue_(std::make_unique<Queue>()),
      schedule_(std::make_unique<ScheduleCheck>(context_.name, context_.size)) {
  if (context_.device_memory != nullptr && !context_.device_memory->is_host())
    memory_staging_ = std::make_unique<MemoryStaging>(context_, backend_->memory());
  DSCPP_CHECK_EQ(backend_->rank(), context_.rank);
  DSCPP_CHECK_EQ(backend_->size(), context_.size);
  Queue& q = *queue_;
  FlightRecorder& recorder = *recorder_;
  q.worker = std::thread([this, &q, &recorder] {
    for (;;) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock lock(q.mutex);
        q.wake.wait(lock, [&] { return q.stopping || !q.pending.empty(); });
        if (q.pending.empty()) return;
        task = q.pending.front();
      }
      double start = recorder.now_s();
      try {
        if (task->check) schedule_->verify(*backend_, *task->check);
        if (task->body)
          task->body();
        else if (!task->mark)
          run_staged(task->op);
      } catch (const std::exception& e) {
        task->error = std::current_exception();
        // An engine that gave up at the group timeout gets the same forensics as a hang.
        double ran = recorder.now_s() - start;
        if (!task->body && ran >= 0.9 * std::chrono::duration<double>(context_.timeout).count()) {
          task->reporting = true;
          try {
            recorder.report_hang(task->seq, ran, e.what(), task->what);
          } catch (...) {
            task->error = std::current_exception();
          }
        }
      }
      double end = recorder.now_s();
      OpObserver observer;
      {
        std::lock_guard lock(q.mutex);
        q.pending.pop_front();
        if (!task->mark) recorder.finished(task->seq, end);
        q.stats.busy_s += end - start;
        if (!task->mark && !task->body && !task->error) observer = q.observer;
      }
      if (observer) {
        const OpDesc& op = task->op;
        observer(OpRecord{task->seq, op.kind, op.dtype, op.reduce, payload_bytes(op, size()), start, end});
      }
      // A mark carries the number of the operation after it, which has not run yet.
      if (!task->error && !task->mark) recorder.completed(task->seq);
      {
        std::lock_guard lock(task->mutex);
        task->done = true;
      }
      task->finished.notify_all();
    }
  });
}

Communicator::~Communicator() {
  Queue& q = *queue_;
  {
    std::lock_guard lock(q.mutex);
    q.stopping = true;
  }
  q.wake.notify_all();
  recorder_->stop();
  if (q.wedged) {
    // The engine may never return from the hung operation, and a hang report may still be
    // running on it: leave both (and the backend, the queue and the recorder they use) alone
    // rather than block the process's exit on them.
    q.worker.detach();
    (void)backend_.release();
    (void)queue_.release();
    (void)schedule_.release();
    (void)recorder_.release();
    return;
  }
  q.worker.join();
}

WorkHandle Communicator::submit(const OpDesc& op) {
  auto task = std::make_shared<Task>();
  task->op = op;
  Queue& q = *queue_;
  {
    std::lock_guard lock(q.mutex);
    if (q.wedged) fail("group '{}': an earlier operation hung; this communicator cannot be used again", context_.name);
    task->seq = ++q.next_seq;
    if (q.checking) task->check = schedule_->sign_op(op, task->seq);
    OpRecord record{task->seq, op.kind, op.dtype, op.reduce, payload_bytes(op, size()), recorder_->now_s(), 0};
    recorder_->record(record);
    q.stats.ops++;
    q.stats.payload_bytes += record.bytes;
    const size_t wire = wire_bytes(op, size());
    q.stats.wire_bytes += wire;
    q.stats.wire_bytes_by_kind[static_cast<size_t>(op.kind)] += wire;
    q.pending.push_back(task);
  }
  q.wake.notify_one();
  return std::make_shared<TaskWork>(
      task, [this](uint64_t seq, double waited) { hung(seq, waited); }, context_.timeout);
}

static bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

static void scale_in_place(void* data, size_t count, DType dtype, double factor) {
  if (dtype == DType::f32) {
    auto* p = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(p[i] * factor);
  } else if (dtype == DType::f64) {
    auto* p = static_cast<double*>(data);
    for (size_t i = 0; i < count; ++i) p[i] *= factor;
  } else {
    fail("avg of {} values needs an engine that averages them", dtype_name(dtype));
  }
}

// Runs on the progress thread. Buffers the engine cannot reach go through the staging area.
void Communicator::run_staged(const OpDesc& op) {
  if (op.count == 0 && op.kind != OpKind::barrier) return;  // same on every rank by contract
  if (memory_staging_ && memory_staging_->needed(op))
    return memory_staging_->run(op, size(), [this](const OpDesc& piece) { run_on_engine(piece); });
  run_on_engine(op);
}

// Engines lacking a dtype or reduction get fp32 (or sum + scale) here, once, instead of in
// every caller. The buffers are where the engine reads them.
void Communicator::run_on_engine(const OpDesc& op) {
  bool reduces = op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter;
  if (!reduces || backend_->supports(op.dtype, op.reduce)) return backend_->run(op);

  size_t out_count = op.count;
  size_t in_count = op.kind == OpKind::reduce_scatter ? op.count * size() : op.count;
  if (op.reduce == ReduceOp::avg && backend_->supports(op.dtype, ReduceOp::sum) &&
      (op.dtype == DType::f32 || op.dtype == DType::f64)) {
    OpDesc sum = op;
    sum.reduce = ReduceOp::sum;
    backend_->run(sum);
    return scale_in_place(op.output, out_count, op.dtype, 1.0 / size());
  }
  if (!is_half(op.dtype))
    fail("group '{}': the {} engine cannot {}-reduce {} values", context_.name, backend_->name(),
         reduce_op_name(op.reduce), dtype_name(op.dtype));
  // Reduce fp16/bf16 in fp32 and round once: more accurate than the engine's own half sums.
  // Kept across calls (only the progress thread gets here): gradients are staged every step.
  if (staging_.size() < in_count + out_count) staging_.resize(in_count + out_count);
  float* in = staging_.data();
  convert(op.input, op.dtype, in, DType::f32, in_count);
  float* out = op.kind == OpKind::reduce_scatter ? in + in_count : in;
  OpDesc staged = op;
  staged.dtype = DType::f32;
  staged.input = in;
  staged.output = out;
  run_on_engine(staged);
  convert(out, DType::f32, op.output, op.dtype, out_count);
}

WorkHandle Communicator::allreduce_async(void* buffer, size_t count, DType dtype, ReduceOp op) {
  return submit({OpKind::allreduce, buffer, buffer, count, dtype, op, 0});
}
WorkHandle Communicator::reduce_scatter_async(const void* input, void* output, size_t count, DType dtype, ReduceOp op) {
  return submit({OpKind::reduce_scatter, input, output, count, dtype, op, 0});
}
WorkHandle Communicator::allgather_async(const void* input, void* output, size_t count, DType dtype) {
  return submit({OpKind::allgather, input, output, count, dtype, ReduceOp::sum, 0});
}
WorkHandle Communicator::broadcast_async(void* buffer, size_t count, DType dtype, int root) {
  if (root < 0 || root >= size())
    fail("group '{}': broadcast root {} is not a rank of a group of {}", context_.name, root, size());
  return submit({OpKind::broadcast, buffer, buffer, count, dtype, ReduceOp::sum, root});
}
WorkHandle Communicator::all_to_all_async(const void* input, void* output, size_t count, DType dtype) {
  return submit({OpKind::all_to_all, input, output, count, dtype, ReduceOp::sum, 0});
}
WorkHandle Communicator::barrier_async() { return submit({}); }

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  // With the schedule check on, the ranks first agree that they are all splitting, instead of
  // waiting in the store exchange below for a rank that is doing something else.
  if (schedule_check()) run_control(nullptr, ScheduleMark::split, {});
  uint64_t index = ++splits_;
  std::string tag = fmt::format("split{}", index);
  auto& store = *context_.store;
  store.set(fmt::format("{}/{}", tag, rank()), fmt::format("{} {}", color, key));
  std::vector<std::tuple<int, int, int>> same;  // (key, parent rank, color)
  for (int r = 0; r < size(); ++r) {
    std::string v = store.get(fmt::format("{}/{}", tag, r), context_.timeout);
    int c = 0, k = 0;
    if (std::sscanf(v.c_str(), "%d %d", &c, &k) != 2)
      fail("group '{}': malformed split record '{}' from rank {}", context_.name, v, r);
    if (c == color && color >= 0) same.emplace_back(k, r, c);
  }
  std::sort(same.begin(), same.end());
  SplitPlan plan;
  plan.color = color;
  plan.key = key;
  for (const auto& [k, r, c] : same) plan.members.push_back(r);
  plan.context = context_;
  plan.context.name = name;
  plan.context.size = static_cast<int>(plan.members.size());
  plan.context.rank = -1;
  for (size_t i = 0; i < plan.members.size(); ++i)
    if (plan.members[i] == rank()) plan.context.rank = static_cast<int>(i);
  plan.context.store = std::make_shared<PrefixStore>(fmt::format("{}.c{}", tag, color), context_.store);

  std::unique_ptr<Backend> sub;
  run_control([&] { sub = backend_->split(plan); }, std::nullopt, {});
  if (color < 0) return nullptr;
  if (!sub)
    fail("group '{}': the {} engine returned no sub-group for color {}", context_.name, backend_->name(), color);
  auto child = std::make_unique<Communicator>(plan.context, std::move(sub));
  child->set_schedule_check(schedule_check());
  return child;
}

void Communicator::run_control(std::function<void()> body, std::optional<ScheduleMark> mark, std::string_view label) {
  auto task = std::make_shared<Task>();
  task->body = std::move(body);
  task->mark = mark.has_value();
  Queue& q = *queue_;
  {
    std::lock_guard lock(q.mutex);
    if (q.wedged) fail("group '{}': an earlier operation hung; this communicator cannot be used again", context_.name);
    if (mark) {
      if (!q.checking) return;
      task->seq = q.next_seq + 1;
      task->check = *mark == ScheduleMark::checkpoint ? schedule_->sign_checkpoint(label, task->seq)
                                                      : schedule_->sign_split(task->seq);
      task->what = *mark == ScheduleMark::checkpoint
                       ? fmt::format("schedule checkpoint '{}' (before operation #{})", label, task->seq)
                       : fmt::format("the schedule check of split #{}", task->seq);
    } else {
      task->seq = ++q.next_seq;
    }
    q.pending.push_back(task);
  }
  q.wake.notify_one();
  TaskWork(task, [this, what = task->what](uint64_t seq, double waited) { hung(seq, waited, what); }, context_.timeout)
      .wait();
}

void Communicator::set_schedule_check(bool on) {
  std::lock_guard lock(queue_->mutex);
  queue_->checking = on;
}

bool Communicator::schedule_check() const { return queue_->checking; }

void Communicator::set_schedule_label(std::string_view label) {
  std::lock_guard lock(queue_->mutex);
  schedule_->set_label(label);
}

void Communicator::schedule_checkpoint(std::string_view label) {
  if (!queue_->checking.load(std::memory_order_relaxed)) return;
  run_control(nullptr, ScheduleMark::checkpoint, label);
}

CommStats Communicator::stats() const {
  std::lock_guard lock(queue_->mutex);
  return queue_->stats;
}

void Communicator::set_op_observer(OpObserver observer) {
  std::lock_guard lock(queue_->mutex);
  queue_->observer = std::move(observer);
}

std::vector<OpRecord> Communicator::recent_ops() const { return recorder_->recent(); }

// An operation the caller gave up waiting for: the engine may never return from it.
void Communicator::hung(uint64_t seq, double waited_s, const std::string& what) {
  queue_->wedged = true;
  recorder_->report_hang(seq, waited_s, "", what);
}

BackendChoice parse_backend_choice(std::string_view name) {
  if (name == "auto" || name.empty()) return BackendChoice::automatic;
  if (name == "shm") return BackendChoice::shm;
  if (name == "gloo") return BackendChoice::gloo;
  if (name == "mpi") return BackendChoice::mpi;
  if (name == "nccl") return BackendChoice::nccl;
  if (name == "hierarchical") return BackendChoice::hierarchical;
  fail("unknown communication backend '{}': expected one of auto, shm, gloo, mpi, nccl, hierarchical", name);
}

// ---- the one-rank group ----

namespace {
// Its operations are copies at most, which it makes where the buffers are: a device buffer
// moves with the device's copy, never through the host.
class SelfBackend final : public Backend {
 public:
  explicit SelfBackend(Device* device) : device_(device) {}
  std::string_view name() const override { return "self"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool supports(DType, ReduceOp) const override { return true; }
  Memory memory() const override { return Memory::either; }
  void run(const OpDesc& op) override {
    size_t bytes = op.count * dtype_size(op.dtype);
    if (op.kind == OpKind::allreduce || op.kind == OpKind::broadcast || op.kind == OpKind::barrier) return;
    copy_between(device_, op.output, op.input, bytes);
  }
  std::unique_ptr<Backend> split(const SplitPlan& plan) override {
    return plan.color < 0 ? nullptr : std::make_unique<SelfBackend>(device_);
  }

 private:
  Device* device_;
};
}  // namespace

std::unique_ptr<Backend> make_self_backend(const GroupContext& context) {
  DSCPP_CHECK_EQ(context.size, 1);
  return std::make_unique<SelfBackend>(context.device_memory);
}

}  // namespace dscpp::comm
