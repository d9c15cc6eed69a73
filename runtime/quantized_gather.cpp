#include "runtime/quantized_gather.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/amp_math.h"

#include <algorithm>
#include <cmath>

namespace dscpp::runtime {
namespace {

hd::Storage storage(DType t) {
  switch (t) {
    case DType::f32: return hd::Storage::f32;
    case DType::f16: return hd::Storage::f16;
    case DType::bf16: return hd::Storage::bf16;
    default: fail("qwZ: parameters in {} cannot be quantized (expected fp32, fp16 or bf16)", dtype_name(t));
  }
}

// The allgathers of the int8 data and of the scales, and the dequantization once both arrived.
class QuantizedGather final : public comm::Work {
 public:
  QuantizedGather(DeviceBuffer q, DeviceBuffer scales, comm::WorkHandle data, comm::WorkHandle scale_work, void* dst,
                  int64_t count, int64_t groups, int parts, DType type)
      : q_(std::move(q)), scales_(std::move(scales)), data_(std::move(data)), scale_work_(std::move(scale_work)),
        dst_(dst), count_(count), groups_(groups), parts_(parts), type_(type) {}
  ~QuantizedGather() override {
    // The communicator may still write into q_ and scales_: let it finish before they go.
    try {
      if (data_) data_->wait();
      if (scale_work_) scale_work_->wait();
    } catch (...) {
    }
  }

  void wait() override {
    if (finished_) return;
    data_->wait();
    scale_work_->wait();
    const int64_t elem = static_cast<int64_t>(dtype_size(type_));
    parallel_for(parts_, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        dequantize_int8(q_.as<int8_t>() + p * count_, scales_.as<float>() + p * groups_, count_, groups_,
                        static_cast<char*>(dst_) + p * count_ * elem, type_);
    });
    data_.reset();
    scale_work_.reset();
    q_.reset();
    scales_.reset();
    finished_ = true;
  }
  bool done() const override { return finished_; }

 private:
  DeviceBuffer q_, scales_;
  comm::WorkHandle data_, scale_work_;
  void* dst_;
  int64_t count_, groups_;
  int parts_;
  DType type_;
  bool finished_ = false;
};

}  // namespace

int64_t qwz_group_count(int64_t n) {
  DSCPP_CHECK(n > 0 && n % 8 == 0);
  int64_t g = (n + 7999) / 8000;
  while (n % (8 * g) != 0) ++g;
  while (n % (16 * g) == 0 && n / g > 8000) g *= 2;
  return g;
}

void quantize_int8(const void* x, DType type, int64_t n, int64_t groups, int8_t* q, float* scales) {
  const hd::Storage s = storage(type);
  const int64_t size = n / groups;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g * size;
    float absmax = 0.0f;
    for (int64_t i = b; i < b + size; ++i) absmax = std::max(absmax, std::fabs(hd::load(x, i, s)));
    // DeepSpeed's symmetric int8: 2^8 levels across [−absmax, absmax].
    const float scale = absmax > 0.0f ? 256.0f / (2.0f * absmax) : 1.0f;
    for (int64_t i = b; i < b + size; ++i) {
      const float v = std::nearbyint(hd::load(x, i, s) * scale);
      q[i] = static_cast<int8_t>(std::clamp(v, -128.0f, 127.0f));
    }
    scales[g] = 1.0f / scale;
  }
}

void dequantize_int8(const int8_t* q, const float* scales, int64_t n, int64_t groups, void* out, DType type) {
  const hd::Storage s = storage(type);
  const int64_t size = n / groups;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = g * size; i < (g + 1) * size; ++i) hd::store(out, i, s, static_cast<float>(q[i]) * scales[g]);
}

comm::WorkHandle quantized_allgather(comm::Communicator& comm, Device& device, const void* src, void* dst,
                                     int64_t count, DType type) {
  const int parts = comm.size(), rank = comm.rank();
  const int64_t groups = qwz_group_count(count);
  DeviceBuffer q(device, static_cast<size_t>(parts * count), MemCategory::buffers);
  DeviceBuffer scales(device, static_cast<size_t>(parts * groups) * sizeof(float), MemCategory::buffers);
  // Quantized straight into this rank's slots, then gathered in place.
  int8_t* my_q = q.as<int8_t>() + rank * count;
  float* my_scales = scales.as<float>() + rank * groups;
  quantize_int8(src, type, count, groups, my_q, my_scales);
  comm::WorkHandle data = comm.allgather_async(my_q, q.data(), static_cast<size_t>(count), DType::i8);
  comm::WorkHandle sc = comm.allgather_async(my_scales, scales.data(), static_cast<size_t>(groups), DType::f32);
  return std::make_shared<QuantizedGather>(std::move(q), std::move(scales), std::move(data), std::move(sc), dst, count,
                                           groups, parts, type);
}

}  // namespace dscpp::runtime
