// Where this rank's parameters live between uses (their "home"), and the only way in and out.
//
//   stage 0–2            the whole flat array on the training device (ParamStore gathers into it)
//   stage 3              this rank's slices (layout.part_total elements), group by group:
//     no offload_param   on the training device
//     offload_param cpu  in host memory (DeepSpeed: a pinned CPU flat buffer per group); a
//                        gather copies the slice to the device first
//     offload_param nvme a slice of at least max(1 MiB, aio.block_size) bytes lives in a swap
//                        file, the first max_in_cpu elements of such slices (in group order) and
//                        every smaller slice stay in host memory. A swapped slice is brought into
//                        one of buffer_count host buffers when needed (or earlier: prefetch) and
//                        written back when it changed; a buffer holds the largest swapped slice,
//                        which must not exceed buffer_size elements.
//
// Everyone outside (ParamStore's gathers, MasterWeights' step, initialisation, checkpoint
// loading) goes through open()/copy_to_device()/read_f32()/write_f32(), so none of them knows
// whether a slice is on the device, in host memory or on disk. The CPU kernels address device
// and host memory alike (as everywhere in the runtime: read_f32/write_f32 take such memory);
// the device↔host moves a GPU needs are the Device copies in copy_to_device() and
// write_from_host().
#pragma once

#include "core/dtype.h"
#include "device/device.h"
#include "offload/aio_options.h"
#include "runtime/model/flat_layout.h"
#include "runtime/plans.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dscpp::kernels {
class DeviceMath;
}

namespace dscpp::runtime {

class ParamSwap;  // the NVMe part (param_swap.h)

class ParamHome {
 public:
  enum class Where : uint8_t { device, host, nvme };

  // `rank`: this rank in the layout (ignored when not partitioned). Throws dscpp::Error naming
  // the key when nvme_path is unusable or buffer_size is smaller than a swapped slice.
  ParamHome(const FlatLayout& layout, int rank, Device& device, Device& host, DType dtype, bool partitioned,
            const ParamOffloadPlan& offload = {});
  ~ParamHome();
  ParamHome(const ParamHome&) = delete;
  ParamHome& operator=(const ParamHome&) = delete;

  // Where each group's slice goes under `offload` (stage 3), decided before anything is
  // allocated so that the memory plan can show it; `slot` numbers the NVMe slices.
  struct Placement {
    std::vector<Where> where;
    std::vector<int64_t> offset;  // host: element offset in the host array; nvme: swap slot
    int64_t host_elements = 0, nvme_elements = 0, largest_swapped = 0, slots = 0;
  };
  static Placement place(const FlatLayout& layout, DType dtype, const ParamOffloadPlan& offload);

  DType dtype() const { return dtype_; }
  bool partitioned() const { return partitioned_; }
  const ParamOffloadPlan& offload() const { return offload_; }
  Where where(int group) const { return where_[static_cast<size_t>(group)]; }
  bool all_on_device() const { return offload_.device == OffloadDevice::none; }

  // Stage 0–2: the whole array on the device. Stage 3: nullptr.
  void* full() const { return partitioned_ ? nullptr : device_data_.data(); }
  // Group g's owned slice when it lives on the device, else nullptr.
  void* on_device(int group) const;

  // The slice of group g in addressable memory for as long as the Access lives. `write`: the
  // caller changes it (an NVMe slice is written back when the Access ends); `overwrite`: the
  // caller replaces all of it (an NVMe slice is not read first).
  class Access {
   public:
    Access(Access&& o) noexcept : home_(o.home_), group_(o.group_), data_(o.data_), write_(o.write_) {
      o.home_ = nullptr;
    }
    Access(const Access&) = delete;
    ~Access();
    void* data() const { return data_; }
    template <typename T>
    T* as() const {
      return static_cast<T*>(data_);
    }

   private:
    friend class ParamHome;
    Access(ParamHome* home, int group, void* data, bool write)
        : home_(home), group_(group), data_(data), write_(write) {}
    ParamHome* home_;
    int group_;
    void* data_;
    bool write_;
  };
  Access open(int group, bool write, bool overwrite = false);

  // Group g's owned slice (g.part elements, stored dtype) → device memory (a gather's source).
  void copy_to_device(int group, void* device_dst);
  // Elements [offset, offset + count) of group g's slice ⇄ fp32 (rounded to the stored dtype).
  void read_f32(int group, int64_t offset, int64_t count, float* dst);
  void write_f32(int group, int64_t offset, int64_t count, const float* src);
  // The same from fp32 values in host memory (initialisation, loading weights): rounded on the
  // host, then copied to the device or into the slice's host/NVMe home.
  void write_from_host(int group, int64_t offset, int64_t count, const float* host_src);
  // NVMe: start bringing group g's slice into a buffer. False when no buffer is free (further
  // prefetches would fail too); true otherwise, also for slices that need no bringing in.
  bool prefetch(int group);
  // NVMe: wait for every write-back in flight (before a checkpoint, at the end).
  void flush();

  // Bytes of parameters this rank keeps off the device.
  int64_t host_bytes() const { return host_elements_ * static_cast<int64_t>(elem_); }
  int64_t nvme_bytes() const { return nvme_elements_ * static_cast<int64_t>(elem_); }
  // Host bytes of the NVMe swap buffers (buffer_count × buffer_size, aligned); 0 without NVMe.
  int64_t swap_buffer_bytes() const;
  std::string describe() const;  // one line for the log

 private:
  void close(int group, bool write);
  char* slice(int group) const;  // device or host residence
  kernels::DeviceMath& math_at(int group) const;  // the math of the slice's residence

  const FlatLayout& layout_;
  Device& device_;
  Device& host_;
  DType dtype_;
  size_t elem_;
  bool partitioned_;
  int rank_;
  ParamOffloadPlan offload_;
  std::vector<Where> where_;
  std::vector<int64_t> offset_;  // element offset of each group's slice in its residence
  DeviceBuffer device_data_;     // device residence (the full array below stage 3)
  DeviceBuffer host_data_;       // host residence
  std::unique_ptr<ParamSwap> swap_;
  int64_t host_elements_ = 0, nvme_elements_ = 0;
};

}  // namespace dscpp::runtime
