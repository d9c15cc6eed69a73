#include "runtime/offload/param_swap.h"

#include "core/error.h"

#include <algorithm>

namespace dscpp::runtime {

ParamSwap::ParamSwap(const ParamOffloadPlan& o, int rank, int64_t slot_bytes, int64_t slots)
    : slots_(static_cast<size_t>(slots)) {
  if (o.nvme_path.empty())
    fail("zero_optimization.offload_param.nvme_path: device \"nvme\" needs a directory on the NVMe drive, found none");
  if (o.buffer_count < 1)
    fail("zero_optimization.offload_param.buffer_count: at least 1 buffer is needed to bring a slice in from "
         "{}, found {}",
         o.nvme_path, o.buffer_count);
  try {
    dir_ = std::make_unique<offload::SwapDir>(o.nvme_path, offload::swap_job_id_from_env() + o.swap_suffix, rank);
    io_ = std::make_unique<offload::AsyncIo>(o.aio);
    file_ = std::make_unique<offload::TensorSwapper>(*io_, *dir_, "params", slot_bytes, slots);
  } catch (const Error& e) {
    fail("zero_optimization.offload_param: {}", e.what());
  }
  // DeepSpeed sizes the buffers by buffer_size elements; the slot (the largest swapped slice,
  // checked ≤ buffer_size by ParamHome) is what a buffer must hold, so no more is allocated.
  pool_ = offload::SwapBufferPool(static_cast<int>(o.buffer_count), file_->slot_bytes(), o.pin_memory,
                                  "zero_optimization.offload_param.buffer_count");
}

ParamSwap::~ParamSwap() {
  try {
    flush();
  } catch (...) {
    // The directory goes with us; a failed write-back has nothing left to corrupt.
  }
  for (Slot& s : slots_)
    if (s.io) try {
        s.io.wait();
      } catch (...) {
      }
}

void ParamSwap::settle(Slot& s) {
  if (s.state != State::reading && s.state != State::writing) return;
  const State was = s.state;
  s.io.wait();
  s.io = {};
  s.state = State::resident;
  const int slot = static_cast<int>(&s - slots_.data());
  if (was == State::writing) writing_.erase(std::find(writing_.begin(), writing_.end(), slot));
}

int ParamSwap::take_buffer(int for_slot) {
  if (pool_.free_count() == 0 && !writing_.empty()) {
    // The oldest write-back is the likeliest to be done already.
    Slot& w = slots_[static_cast<size_t>(writing_.front())];
    settle(w);
    w.state = State::on_disk;
    pool_.release(std::exchange(w.buffer, -1));
  }
  if (pool_.free_count() == 0) {
    for (auto it = prefetched_.begin(); it != prefetched_.end(); ++it) {
      Slot& p = slots_[static_cast<size_t>(*it)];
      if (p.users > 0 || *it == for_slot) continue;
      settle(p);
      p.state = State::on_disk;
      pool_.release(std::exchange(p.buffer, -1));
      prefetched_.erase(it);
      break;
    }
  }
  return pool_.acquire();  // throws naming buffer_count when every buffer is in use
}

void* ParamSwap::acquire(int slot, int64_t bytes, bool read) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.state == State::on_disk) {
    s.buffer = take_buffer(slot);
    if (read) s.io = file_->swap_in(slot, pool_.data(s.buffer), bytes);
    s.state = read ? State::reading : State::resident;
  }
  settle(s);
  if (s.users == 0) {
    auto it = std::find(prefetched_.begin(), prefetched_.end(), slot);
    if (it != prefetched_.end()) prefetched_.erase(it);
  }
  ++s.users;
  return pool_.data(s.buffer);
}

void ParamSwap::release(int slot, int64_t bytes, bool dirty) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  DSCPP_CHECK(s.users > 0 && s.state == State::resident);
  if (--s.users > 0) {
    DSCPP_CHECK(!dirty);  // one writer at a time: the engine never shares a slice it changes
    return;
  }
  if (dirty) {
    s.io = file_->swap_out(slot, pool_.data(s.buffer), bytes);
    s.state = State::writing;
    writing_.push_back(slot);
  } else {
    s.state = State::on_disk;
    pool_.release(std::exchange(s.buffer, -1));
  }
}

bool ParamSwap::prefetch(int slot, int64_t bytes) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.state != State::on_disk) return true;  // already coming, here or on its way out (still valid)
  // Write-backs that have finished free their buffers without waiting.
  while (!writing_.empty() && slots_[static_cast<size_t>(writing_.front())].io.done()) {
    Slot& w = slots_[static_cast<size_t>(writing_.front())];
    settle(w);
    w.state = State::on_disk;
    pool_.release(std::exchange(w.buffer, -1));
  }
  if (pool_.free_count() < 2) return false;  // keep one for acquire()
  s.buffer = pool_.acquire();
  s.io = file_->swap_in(slot, pool_.data(s.buffer), bytes);
  s.state = State::reading;
  prefetched_.push_back(slot);
  return true;
}

void ParamSwap::flush() {
  while (!writing_.empty()) {
    Slot& w = slots_[static_cast<size_t>(writing_.front())];
    settle(w);
    w.state = State::on_disk;
    pool_.release(std::exchange(w.buffer, -1));
  }
}

}  // namespace dscpp::runtime
