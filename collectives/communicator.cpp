#include "collectives/communicator.h"

#include "collectives/memory_staging.h"
#include "collectives/schedule_check.h"
#include "core/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace dscpp::comm {

using Clock = std::chrono::steady_clock;
// The longest a hang report can take: its fixed waits (~6 s) plus one store call at the
// longest reply timeout (store_reply_timeout, 60 s), which marks a stalled store for the rest.
constexpr auto kReportBound = std::chrono::seconds(120);

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

std::string describe(const OpRecord& r) {
  if (r.kind == OpKind::barrier) return fmt::format("barrier #{}", r.seq);
  std::string what = fmt::format("{} #{} ({}", op_kind_name(r.kind), r.seq, dtype_name(r.dtype));
  if (r.kind == OpKind::allreduce || r.kind == OpKind::reduce_scatter)
    what += fmt::format(" {}", reduce_op_name(r.reduce));
  return what + fmt::format(", {:.2f} MiB)", static_cast<double>(r.bytes) / (1 << 20));
}

}  // namespace

// The progress thread, the ring of recent operations and the progress publisher.
struct Communicator::Queue {
  static constexpr size_t kRing = 64;

  Clock::time_point created = Clock::now();
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::shared_ptr<Task>> pending;
  bool stopping = false;
  uint64_t next_seq = 0;
  std::deque<OpRecord> ring;
  CommStats stats;
  OpObserver observer;  // written under `mutex`
  std::atomic<uint64_t> last_done{0};
  std::atomic<bool> wedged{false};  // a hang was reported: the engine may never return
  std::atomic<bool> checking{false};  // the schedule check; written under `mutex`
  std::thread worker;
  std::thread publisher;
  std::condition_variable publisher_wake;

  double now_s() const { return std::chrono::duration<double>(Clock::now() - created).count(); }
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
      if (!task_->reporting || !task_->finished.wait_for(lock, kReportBound, [&] { return task_->done; })) {
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
    : context_(std::move(context)), backend_(std::move(backend)), queue_(std::make_unique<Queue>()),
      schedule_(std::make_unique<ScheduleCheck>(context_.name, context_.size)) {
  if (context_.device_memory != nullptr && !context_.device_memory->is_host())
    memory_staging_ = std::make_unique<MemoryStaging>(context_, backend_->memory());
  DSCPP_CHECK_EQ(backend_->rank(), context_.rank);
  DSCPP_CHECK_EQ(backend_->size(), context_.size);
  Queue& q = *queue_;
  q.worker = std::thread([this, &q] {
    for (;;) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock lock(q.mutex);
        q.wake.wait(lock, [&] { return q.stopping || !q.pending.empty(); });
        if (q.pending.empty()) return;
        task = q.pending.front();
      }
      double start = q.now_s();
      try {
        if (task->check) schedule_->verify(*backend_, *task->check);
        if (task->body)
          task->body();
        else if (!task->mark)
          run_staged(task->op);
      } catch (const std::exception& e) {
        task->error = std::current_exception();
        // An engine that gave up at the group timeout gets the same forensics as a hang.
        double ran = q.now_s() - start;
        if (!task->body && ran >= 0.9 * std::chrono::duration<double>(context_.timeout).count()) {
          task->reporting = true;
          try {
            report_hang(task->seq, ran, e.what(), task->what);
          } catch (...) {
            task->error = std::current_exception();
          }
        }
      }
      double end = q.now_s();
      OpObserver observer;
      {
        std::lock_guard lock(q.mutex);
        q.pending.pop_front();
        if (!task->mark)
          for (auto& r : q.ring)
            if (r.seq == task->seq) r.end_s = end;
        q.stats.busy_s += end - start;
        if (!task->mark && !task->body && !task->error) observer = q.observer;
      }
      if (observer) {
        const OpDesc& op = task->op;
        observer(OpRecord{task->seq, op.kind, op.dtype, op.reduce, payload_bytes(op, size()), start, end});
      }
      // A mark carries the number of the operation after it, which has not run yet.
      if (!task->error && !task->mark) q.last_done = task->seq;
      {
        std::lock_guard lock(task->mutex);
        task->done = true;
      }
      task->finished.notify_all();
    }
  });
  // Publishes "<seq> <op> <age>" at most once a second when it changed, so that a rank that
  // times out can say how far every peer got without asking them anything.
  q.publisher = std::thread([this, &q] {
    uint64_t published = 0;
    std::unique_lock lock(q.mutex);
    while (!q.stopping) {
      q.publisher_wake.wait_for(lock, std::chrono::seconds(1));
      uint64_t done = q.last_done;
      if (done == published || q.stopping) continue;
      std::string record = fmt::format("{}", done);
      for (const auto& r : q.ring)
        if (r.seq == done) record = fmt::format("{} {} {:.3f}", done, op_kind_name(r.kind), r.end_s);
      lock.unlock();
      try {
        context_.store->set(fmt::format("progress/{}", context_.rank), record);
        published = done;
      } catch (const std::exception& e) {
        log::debug("group '{}': could not publish progress: {}", context_.name, e.what());
      }
      lock.lock();
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
  q.publisher_wake.notify_all();
  q.publisher.join();
  if (q.wedged) {
    // The engine may never return from the hung operation: leave it (and the backend it uses)
    // alone rather than block the process's exit on it.
    q.worker.detach();
    (void)backend_.release();
    (void)queue_.release();
    (void)schedule_.release();
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
    OpRecord record{task->seq, op.kind, op.dtype, op.reduce, payload_bytes(op, size()), q.now_s(), 0};
    q.ring.push_back(record);
    if (q.ring.size() > Queue::kRing) q.ring.pop_front();
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

std::vector<OpRecord> Communicator::recent_ops() const {
  std::lock_guard lock(queue_->mutex);
  return {queue_->ring.begin(), queue_->ring.end()};
}

// Writes this rank's recent operations to the log, tells the others how far it got, reads how
// far they got, and fails with a message naming the ranks that are behind.
void Communicator::hung(uint64_t seq, double waited_s, const std::string& what) {
  queue_->wedged = true;
  report_hang(seq, waited_s, "", what);
}

void Communicator::report_hang(uint64_t seq, double waited_s, const std::string& engine_message,
                               const std::string& what) {
  Queue& q = *queue_;
  std::string mine, current = what.empty() ? fmt::format("operation #{}", seq) : what;
  for (const auto& r : recent_ops()) {
    mine += fmt::format("\n  {}, started at {:.3f} s, {}", describe(r), r.start_s,
                        r.end_s > 0 ? fmt::format("took {:.3f} s", r.end_s - r.start_s) : std::string("unfinished"));
    if (r.seq == seq && what.empty()) current = describe(r);
  }
  log::error("group '{}' ({}): {} has not finished after {:.1f} s; this rank's last operations:{}", context_.name,
             backend_->name(), current, waited_s, mine);
  auto& store = *context_.store;
  struct Peer {
    int rank;
    std::string progress, hang;
  };
  std::vector<Peer> peers;
  try {
    store.set(fmt::format("progress/{}", rank()), fmt::format("{}", q.last_done.load()));
    store.set(fmt::format("hang/{}", rank()), fmt::format("{}", seq));
    // Peers publish progress within a second of finishing an operation; give them that long.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // A peer stuck in this same operation writes its hang record when its own engine gives up,
    // which can be seconds after ours (a ring neighbour whose receive started later, or that
    // failed only when another rank's exit closed its connection: seen 2 s late under load).
    // Wait for the missing records up to the group timeout in all, capped at 5 s; a rank that
    // is really behind never writes one, so that case costs the whole window.
    std::vector<std::string> hang_keys;
    for (int r = 0; r < size(); ++r)
      if (r != rank()) hang_keys.push_back(fmt::format("hang/{}", r));
    const Millis extra = std::clamp(std::chrono::duration_cast<Millis>(context_.timeout) - Millis(1500), Millis(0),
                                    Millis(3500));
    if (extra > Millis(0)) store.wait(hang_keys, extra);
    auto read = [&](const std::string& key) { return store.check(key) ? store.get(key, Millis(1000)) : std::string(); };
    for (int r = 0; r < size(); ++r)
      if (r != rank()) peers.push_back({r, read(fmt::format("progress/{}", r)), read(fmt::format("hang/{}", r))});
  } catch (const std::exception& e) {
    throw PeerFailure(fmt::format(
        "group '{}' ({}): {} did not complete within the group timeout ({:g} s; rank {} waited {:.1f} s), and the "
        "store could not be asked about the other ranks: {}",
        context_.name, backend_->name(), current, std::chrono::duration<double>(context_.timeout).count(), rank(),
        waited_s, e.what()));
  }
  // World rank 0 hosts the store: stay a moment so that the others can finish their reading
  // before this rank's failure takes the store down.
  if (context_.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::vector<int> silent, waiting;
  std::string behind;
  for (const auto& p : peers) {
    uint64_t done = 0;
    char op[32] = "";
    double at = 0;
    int fields = p.progress.empty() ? 0 : std::sscanf(p.progress.c_str(), "%" SCNu64 " %31s %lf", &done, op, &at);
    if (p.hang == std::to_string(seq)) {
      waiting.push_back(p.rank);
    } else if (fields == 0 || (done == 0 && p.hang.empty())) {
      silent.push_back(p.rank);
    } else {
      // Progress is published at most once a second, so a peer that stopped may have done more.
      behind += fmt::format("; rank {} had finished at least #{}{}", p.rank, done,
                            fields >= 2 ? fmt::format(" ({})", op) : "");
    }
  }
  std::string message = fmt::format(
      "group '{}' ({}): {} did not complete within the group timeout ({:g} s; rank {} waited {:.1f} s)", context_.name,
      backend_->name(), current, std::chrono::duration<double>(context_.timeout).count(), rank(), waited_s);
  if (!behind.empty()) message += ". Behind:" + behind.substr(1);
  if (!silent.empty())
    message += fmt::format(". Reported no progress on this group (progress is reported once a second: dead, stopped "
                           "or stuck before its first report): rank{} {}",
                           silent.size() == 1 ? "" : "s", format_rank_list(silent));
  if (!waiting.empty()) message += fmt::format(". Waiting in the same operation: {}", format_rank_list(waiting));
  if (!engine_message.empty()) message += fmt::format(". The engine said: {}", engine_message);
  throw PeerFailure(message);
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
