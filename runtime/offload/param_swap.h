// The NVMe part of ParamHome: stage-3 parameter slices in one swap file, one slot per slice,
// moved through buffer_count host buffers (offload_param.buffer_count × buffer_size) by the
// TensorSwapper.
//
// A slot is on disk, being read into a buffer, resident in a buffer, or being written back from
// one. acquire() makes it resident (waiting for a prefetch or a write-back of the same slot
// instead of reading it again); release() gives the buffer back at once when the slice is
// unchanged, or after its write-back when it changed. A buffer is free for reuse as soon as
// nothing needs it; when none is, acquire() waits for the oldest write-back, then takes a
// prefetched slice that is not in use, and only then fails, naming buffer_count (DeepSpeed
// asserts there). prefetch() never takes the last free buffer, so it cannot starve acquire().
#pragma once

#include "offload/async_io.h"
#include "offload/swap_dir.h"
#include "offload/tensor_swapper.h"
#include "runtime/offload/param_home.h"

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace dscpp::runtime {

class ParamSwap {
 public:
  // Creates the swap directory under offload.nvme_path and a file of `slots` slots of
  // slot_bytes; throws naming zero_optimization.offload_param.nvme_path when it cannot.
  ParamSwap(const ParamOffloadPlan& offload, int rank, int64_t slot_bytes, int64_t slots);
  ~ParamSwap();

  // The slice of `slot` (bytes long) in a host buffer; `read`: its contents are wanted.
  void* acquire(int slot, int64_t bytes, bool read);
  void release(int slot, int64_t bytes, bool dirty);
  bool prefetch(int slot, int64_t bytes);  // false: no buffer to spare
  void flush();

  int buffer_count() const { return pool_.count(); }
  int64_t buffer_bytes() const { return pool_.bytes(); }
  const std::string& path() const { return file_->path(); }
  int64_t bytes_read() const { return file_->bytes_read(); }
  int64_t bytes_written() const { return file_->bytes_written(); }

 private:
  enum class State : uint8_t { on_disk, reading, resident, writing };
  struct Slot {
    State state = State::on_disk;
    int buffer = -1;
    int users = 0;
    offload::IoHandle io;
  };
  int take_buffer(int for_slot);
  void settle(Slot& s);  // a read or write in flight → finished (resident)

  std::unique_ptr<offload::SwapDir> dir_;
  std::unique_ptr<offload::AsyncIo> io_;
  std::unique_ptr<offload::TensorSwapper> file_;
  offload::SwapBufferPool pool_;
  std::vector<Slot> slots_;
  std::deque<int> writing_;     // slots with a write-back in flight, oldest first
  std::deque<int> prefetched_;  // slots resident without users, oldest first
};

}  // namespace dscpp::runtime
