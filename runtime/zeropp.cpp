#include "runtime/zeropp.h"

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

int64_t qgz_group_size(int64_t part) {
  DSCPP_CHECK(part > 0 && part % 2 == 0);
  for (int64_t g = std::min<int64_t>(kQgzGroup, part); g >= 2; --g)
    if (g % 2 == 0 && part % g == 0) return g;
  return 2;
}

void quantize_int4(const void* x, DType type, int64_t n, int64_t group, uint8_t* q, float* scales) {
  const hd::Storage s = storage(type);
  for (int64_t g = 0; g < n / group; ++g) {
    const int64_t b = g * group;
    float absmax = 0.0f;
    for (int64_t i = b; i < b + group; ++i) absmax = std::max(absmax, std::fabs(hd::load(x, i, s)));
    const float scale = absmax > 0.0f ? 16.0f / (2.0f * absmax) : 1.0f;  // 2^4 levels
    for (int64_t i = b; i < b + group; i += 2) {
      auto level = [&](int64_t k) {
        return static_cast<int>(std::clamp(std::nearbyint(hd::load(x, k, s) * scale), -8.0f, 7.0f));
      };
      q[i / 2] = static_cast<uint8_t>((level(i) & 0xF) | ((level(i + 1) & 0xF) << 4));
    }
    scales[g] = 1.0f / scale;
  }
}

void dequantize_int4_add(const uint8_t* q, const float* scales, int64_t n, int64_t group, float* acc) {
  for (int64_t g = 0; g < n / group; ++g) {
    const float sc = scales[g];
    for (int64_t i = g * group; i < (g + 1) * group; i += 2) {
      const auto byte = static_cast<int8_t>(q[i / 2]);
      acc[i] += static_cast<float>(static_cast<int8_t>(byte << 4) >> 4) * sc;  // low nibble, sign-extended
      acc[i + 1] += static_cast<float>(byte >> 4) * sc;
    }
  }
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

namespace {

// One quantized slice on the wire: part/2 bytes of int4 pairs, then its fp32 group scales.
struct Packet {
  int64_t part = 0, group = 0;
  int64_t data_bytes() const { return part / 2; }
  int64_t bytes() const { return data_bytes() + part / group * static_cast<int64_t>(sizeof(float)); }
  void pack(const void* x, DType type, char* out) const {
    quantize_int4(x, type, part, group, reinterpret_cast<uint8_t*>(out), reinterpret_cast<float*>(out + data_bytes()));
  }
  void add_to(const char* in, float* acc) const {
    dequantize_int4_add(reinterpret_cast<const uint8_t*>(in), reinterpret_cast<const float*>(in + data_bytes()),
                        part, group, acc);
  }
};

class QuantizedReduceScatter final : public comm::Work {
 public:
  QuantizedReduceScatter(comm::Communicator& node, comm::Communicator& cross, Device& device, const void* input,
                         void* out, int64_t part, DType type)
      : cross_(cross), device_(device), out_(out), type_(type), node_size_(node.size()),
        packet_{part, qgz_group_size(part)} {
    const int64_t L = node_size_, N = cross.size(), pkt = packet_.bytes();
    const int64_t elem = static_cast<int64_t>(dtype_size(type));
    send_ = DeviceBuffer(device, static_cast<size_t>(L * N * pkt), MemCategory::buffers);
    recv_ = DeviceBuffer(device, static_cast<size_t>(L * N * pkt), MemCategory::buffers);
    // Chunk d (to the node's rank with local index d) holds, node by node, the slices owned by
    // rank b·L + d.
    parallel_for(L * N, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t d = c / N, b = c % N;
        packet_.pack(static_cast<const char*>(input) + (b * L + d) * part * elem, type, send_.as<char>() + c * pkt);
      }
    });
    hop1_ = node.all_to_all_async(send_.data(), recv_.data(), static_cast<size_t>(N * pkt), DType::u8);
  }
  ~QuantizedReduceScatter() override {
    try {  // the communicator may still use send_ and recv_
      if (hop1_) hop1_->wait();
    } catch (...) {
    }
  }

  void wait() override {
    if (finished_) return;
    hop1_->wait();
    hop1_.reset();
    const int64_t L = node_size_, N = cross_.size(), P = packet_.part, pkt = packet_.bytes();
    // This node's partial sums of the N slices this rank carries across, summed source by source.
    DeviceBuffer partial(device_, static_cast<size_t>(N * P) * sizeof(float), MemCategory::buffers, true);
    float* sums = partial.as<float>();
    parallel_for(N, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t src = 0; src < L; ++src) packet_.add_to(recv_.as<char>() + (src * N + b) * pkt, sums + b * P);
    });
    DeviceBuffer send2(device_, static_cast<size_t>(N * pkt), MemCategory::buffers);
    DeviceBuffer recv2(device_, static_cast<size_t>(N * pkt), MemCategory::buffers);
    for (int64_t b = 0; b < N; ++b) packet_.pack(sums + b * P, DType::f32, send2.as<char>() + b * pkt);
    send_.reset();
    recv_.reset();
    cross_.all_to_all(send2.data(), recv2.data(), static_cast<size_t>(pkt), DType::u8);
    std::fill(sums, sums + P, 0.0f);
    for (int64_t a = 0; a < N; ++a) packet_.add_to(recv2.as<char>() + a * pkt, sums);
    const hd::Storage st = storage(type_);
    for (int64_t i = 0; i < P; ++i) hd::store(out_, i, st, sums[i]);
    finished_ = true;
  }
  bool done() const override { return finished_; }

 private:
  comm::Communicator& cross_;
  Device& device_;
  void* out_;
  DType type_;
  int64_t node_size_;
  Packet packet_;
  DeviceBuffer send_, recv_;
  comm::WorkHandle hop1_;
  bool finished_ = false;
};

}  // namespace

comm::WorkHandle quantized_reduce_scatter(comm::Communicator& node, comm::Communicator& cross, Device& device,
                                          const void* input, void* out, int64_t part, DType type) {
  return std::make_shared<QuantizedReduceScatter>(node, cross, device, input, out, part, type);
}

}  // namespace dscpp::runtime
