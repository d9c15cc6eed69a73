#include "runtime/offload/optimizer_offload.h"

#include "core/error.h"
#include "core/log.h"
#include "offload/aligned_buffer.h"
#include "offload/async_io.h"
#include "offload/swap_dir.h"
#include "offload/tensor_swapper.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

namespace dscpp::runtime {

namespace {

constexpr const char* kKey = "zero_optimization.offload_optimizer";

class ResidentHome final : public StateHome {
 public:
  ResidentHome(Device& memory, Optimizer& optimizer, std::vector<float*> bases)
      : memory_(memory), optimizer_(optimizer), bases_(std::move(bases)) {}
  Device& memory(int) override { return memory_; }
  SubGroupView acquire(int sub) override {
    SubGroupView v;
    v.master = bases_.at(static_cast<size_t>(sub));
    DSCPP_CHECK(v.master != nullptr);  // a sub-group this home holds
    for (const StateTensor& s : optimizer_.state(sub)) v.state.push_back(s.data);
    return v;
  }
  void release(int, bool, bool) override {}

 private:
  Device& memory_;
  Optimizer& optimizer_;
  std::vector<float*> bases_;
};

// Sub-group s's tensor t (0 = master, 1.. = states) is slot s·tensors + t. A "set" is the
// buffers one sub-group occupies while it is read, stepped, or written; pipelining needs up to
// three sets (being read, stepping, being written). A released set keeps its sub-group cached
// until its buffers are needed, so checkpoint access that walks a sub-group in pieces reads it
// once.
class SwappedHome final : public StateHome {
 public:
  SwappedHome(Optimizer& optimizer, std::vector<int64_t> numels, const OptimizerOffloadPlan& o, int rank)
      : optimizer_(optimizer),
        numels_(std::move(numels)),
        tensors_(1 + static_cast<int>(optimizer.state_names().size())),
        options_(o),
        host_(make_host_device()),
        dir_(o.nvme_path, offload::swap_job_id_from_env(), rank),
        io_(o.aio) {
    const int64_t max_numel = *std::max_element(numels_.begin(), numels_.end());
    const SwapFootprint need = swap_footprint(o, max_numel, static_cast<int64_t>(numels_.size()), tensors_ - 1);
    if (o.buffer_count < need.buffers_needed)
      fail("{}.buffer_count is {}, but optimizer {} swaps {} tensors per sub-group (the fp32 master and {}) and {} "
           "holds {} sub-group{} at once: set buffer_count to at least {}",
           kKey, o.buffer_count, optimizer.name(), tensors_, fmt::join(optimizer.state_names(), ", "),
           o.pipeline_read || o.pipeline_write ? "pipelining (pipeline_read/pipeline_write)" : "a step",
           need.buffers_needed / tensors_, need.buffers_needed > tensors_ ? "s" : "", need.buffers_needed);
    swapper_ = std::make_unique<offload::TensorSwapper>(io_, dir_, "optimizer", max_numel * 4,
                                                        static_cast<int64_t>(numels_.size()) * tensors_);
    const std::string what = std::string(kKey) + ".buffer_count";
    try {
      pool_ = offload::SwapBufferPool(o.buffer_count, max_numel * 4, o.pin_memory, what);
    } catch (const InternalError&) {
      throw;
    } catch (const Error& e) {
      // Pinning is a speed hint (DeepSpeed's default since 0.19.5); a memlock limit below the
      // pool should not stop the job. A pool that cannot be allocated at all still fails.
      if (!o.pin_memory) throw;
      log::warn("{}.pin_memory: {}; the swap buffers stay unpinned (pageable)", kKey, e.what());
      pool_ = offload::SwapBufferPool(o.buffer_count, max_numel * 4, false, what);
    }
    sets_.resize(static_cast<size_t>(need.buffers_needed / tensors_));
    for (Set& s : sets_)
      for (int t = 0; t < tensors_; ++t) s.bufs.push_back(pool_.acquire());
    // The initial state of every sub-group, computed by the optimizer and written out.
    for (size_t sub = 0; sub < numels_.size(); ++sub) {
      Set& s = take_set();
      s.sub = static_cast<int>(sub);
      s.state = State::in_use;
      SubGroupView v = view(s);
      std::fill_n(v.master, numels_[sub], 0.0f);
      optimizer_.bind_state(s.sub, v.state, /*initialise=*/true);
      release(s.sub, true, true);
    }
    flush();
  }

  ~SwappedHome() override {
    try {
      flush();
    } catch (...) {
      // The job is failing already (the error that unwinds names the cause); nothing to add.
    }
  }

  Device& memory(int) override { return *host_; }

  void prefetch(int sub) override {
    if (!options_.pipeline_read || sub < 0 || sub >= static_cast<int>(numels_.size()) || find(sub)) return;
    start_read(take_set(), sub);
  }

  SubGroupView acquire(int sub) override {
    Set* s = find(sub);
    if (!s) {
      s = &take_set();
      start_read(*s, sub);
    }
    DSCPP_CHECK(s->state != State::in_use);
    wait(*s);  // its reads, or (a cached set) the writes still in flight from its buffers
    s->state = State::in_use;
    SubGroupView v = view(*s);
    optimizer_.bind_state(sub, v.state, false);
    return v;
  }

  void release(int sub, bool dirty, bool write_now) override {
    Set* s = find(sub);
    DSCPP_CHECK(s && s->state == State::in_use);
    s->dirty = s->dirty || dirty;
    s->state = State::cached;
    s->released_at = ++clock_;
    if (!write_now) return;
    write(*s);
    if (!options_.pipeline_write) wait(*s);
  }

  void flush() override {
    for (Set& s : sets_)
      if (s.state == State::cached) {
        write(s);
        wait(s);
      }
  }

  SwapStats swap_stats() const override {
    return {swapper_->bytes_read(), swapper_->bytes_written(), wait_s_};
  }
  int64_t pool_bytes() const override { return pool_.bytes(); }

 private:
  enum class State { free, reading, in_use, cached };
  struct Set {
    int sub = -1;
    State state = State::free;
    std::vector<int> bufs;  // one per tensor
    std::vector<offload::IoHandle> io;
    int64_t released_at = 0;
    bool dirty = false;  // the buffers are newer than the slots
  };

  void write(Set& s) {
    if (!s.dirty) return;
    for (int t = 0; t < tensors_; ++t)
      s.io.push_back(swapper_->swap_out(slot(s.sub, t), pool_.data(s.bufs[static_cast<size_t>(t)]), bytes(s.sub)));
    s.dirty = false;
  }

  int64_t slot(int sub, int t) const { return static_cast<int64_t>(sub) * tensors_ + t; }
  int64_t bytes(int sub) const { return numels_[static_cast<size_t>(sub)] * 4; }

  SubGroupView view(const Set& s) {
    SubGroupView v;
    v.master = reinterpret_cast<float*>(pool_.data(s.bufs[0]));
    for (int t = 1; t < tensors_; ++t)
      v.state.push_back(reinterpret_cast<float*>(pool_.data(s.bufs[static_cast<size_t>(t)])));
    return v;
  }

  Set* find(int sub) {
    for (Set& s : sets_)
      if (s.sub == sub && s.state != State::free) return &s;
    return nullptr;
  }

  // A free set, else the one released longest ago (its writes waited for first).
  Set& take_set() {
    Set* best = nullptr;
    for (Set& s : sets_) {
      if (s.state == State::free) return s;
      if (s.state == State::cached && (!best || s.released_at < best->released_at)) best = &s;
    }
    DSCPP_CHECK(best != nullptr);  // sets_ is sized for the most the step loop holds at once
    write(*best);
    wait(*best);
    best->sub = -1;
    best->state = State::free;
    return *best;
  }

  void start_read(Set& s, int sub) {
    s.sub = sub;
    s.state = State::reading;
    for (int t = 0; t < tensors_; ++t)
      s.io.push_back(swapper_->swap_in(slot(sub, t), pool_.data(s.bufs[static_cast<size_t>(t)]), bytes(sub)));
  }

  void wait(Set& s) {
    if (s.io.empty()) return;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<offload::IoHandle> io = std::move(s.io);
    s.io.clear();
    // All of them, even after a failure: the buffers must be idle before anyone reuses them.
    std::exception_ptr first;
    for (offload::IoHandle& h : io) try {
        h.wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (first) std::rethrow_exception(first);
  }

  Optimizer& optimizer_;
  std::vector<int64_t> numels_;
  int tensors_;
  OptimizerOffloadPlan options_;
  std::unique_ptr<Device> host_;
  // Declared so that io_ is destroyed first: its destructor drains every request while the
  // buffers, the swap file and its directory still exist (also when the constructor throws).
  offload::SwapBufferPool pool_;
  offload::SwapDir dir_;
  std::unique_ptr<offload::TensorSwapper> swapper_;
  offload::AsyncIo io_;
  std::vector<Set> sets_;
  int64_t clock_ = 0;
  double wait_s_ = 0;
};

// Routes each sub-group to the home that holds it. The offloaded ones come first, so the
// swapped home's pipelining (prefetch of sub-group i+1, and of 0 after the step) sees exactly
// its own sub-groups: a prefetch past them reaches the resident home, which has nothing to do.
class SplitHome final : public StateHome {
 public:
  SplitHome(std::unique_ptr<StateHome> offloaded, int count, std::unique_ptr<StateHome> resident)
      : offloaded_(std::move(offloaded)), count_(count), resident_(std::move(resident)) {}
  Device& memory(int sub) override { return at(sub).memory(sub); }
  void prefetch(int sub) override { at(sub).prefetch(sub); }
  SubGroupView acquire(int sub) override { return at(sub).acquire(sub); }
  void release(int sub, bool dirty, bool write_now) override { at(sub).release(sub, dirty, write_now); }
  void flush() override {
    offloaded_->flush();
    resident_->flush();
  }
  SwapStats swap_stats() const override { return offloaded_->swap_stats(); }
  int64_t pool_bytes() const override { return offloaded_->pool_bytes(); }

 private:
  StateHome& at(int sub) { return sub < count_ ? *offloaded_ : *resident_; }
  std::unique_ptr<StateHome> offloaded_;
  int count_;
  std::unique_ptr<StateHome> resident_;
};

}  // namespace

int offloaded_sub_groups(const OptimizerOffloadPlan& options, int sub_groups) {
  if (options.device == OffloadDevice::none) return 0;
  return std::clamp(static_cast<int>(options.ratio * static_cast<double>(sub_groups)), 0, sub_groups);
}

SwapFootprint swap_footprint(const OptimizerOffloadPlan& options, int64_t max_sub_numel, int64_t sub_count,
                             int64_t state_count) {
  SwapFootprint f;
  const int64_t tensors = 1 + state_count;
  const int64_t slot = offload::round_up(std::max<int64_t>(max_sub_numel, 1) * 4, offload::kDirectIoAlignment);
  const int sets = 1 + (options.pipeline_read ? 1 : 0) + (options.pipeline_write ? 1 : 0);
  f.buffers_needed = sets * static_cast<int>(tensors);
  f.pool_bytes = static_cast<int64_t>(options.buffer_count) * slot;
  f.file_bytes = sub_count * tensors * slot;
  return f;
}

std::unique_ptr<StateHome> make_resident_home(Device& memory, Optimizer& optimizer, std::vector<float*> master_bases) {
  return std::make_unique<ResidentHome>(memory, optimizer, std::move(master_bases));
}

std::unique_ptr<StateHome> make_split_home(std::unique_ptr<StateHome> offloaded, int offloaded_count,
                                           std::unique_ptr<StateHome> resident) {
  return std::make_unique<SplitHome>(std::move(offloaded), offloaded_count, std::move(resident));
}

std::unique_ptr<StateHome> make_swapped_home(Optimizer& optimizer, const std::vector<int64_t>& numels,
                                             const OptimizerOffloadPlan& options, int rank) {
  DSCPP_CHECK(!numels.empty());
  try {
    return std::make_unique<SwappedHome>(optimizer, numels, options, rank);
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    // Say which setting led here: the swap layer's message names the path and the remedy.
    fail("{} (device nvme, nvme_path {}): {}", kKey, options.nvme_path, e.what());
  }
}

}  // namespace dscpp::runtime
