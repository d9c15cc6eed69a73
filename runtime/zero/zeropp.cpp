#include "runtime/zero/zeropp.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/device_math.h"
#include "kernels/quant_math.h"

#include <algorithm>
#include <cmath>

namespace dscpp::runtime {
namespace {

// The allgathers of the int8 data and of the scales, and the dequantization once both arrived.
class QuantizedGather final : public comm::Work {
 public:
  QuantizedGather(kernels::DeviceMath& math, DeviceBuffer q, DeviceBuffer scales, comm::WorkHandle data,
                  comm::WorkHandle scale_work, void* dst, int64_t count, int64_t groups, int parts, DType type)
      : math_(math),
        q_(std::move(q)),
        scales_(std::move(scales)),
        data_(std::move(data)),
        scale_work_(std::move(scale_work)),
        dst_(dst),
        count_(count),
        groups_(groups),
        parts_(parts),
        type_(type) {}
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
    for (int p = 0; p < parts_; ++p)  // each a parallel loop over its groups
      math_.dequantize_int8_groups(q_.as<int8_t>() + p * count_, scales_.as<float>() + p * groups_, count_,
                                      groups_, static_cast<char*>(dst_) + p * count_ * elem, type_);
    data_.reset();
    scale_work_.reset();
    q_.reset();
    scales_.reset();
    finished_ = true;
  }
  bool done() const override { return finished_; }

 private:
  kernels::DeviceMath& math_;
  DeviceBuffer q_, scales_;
  comm::WorkHandle data_, scale_work_;
  void* dst_;
  int64_t count_, groups_;
  int parts_;
  DType type_;
  bool finished_ = false;
};

}  // namespace

int64_t qgz_group_size(int64_t part) {
  DSCPP_CHECK(part > 0 && part % 2 == 0);
  for (int64_t g = std::min<int64_t>(kQgzGroup, part); g >= 2; --g)
    if (g % 2 == 0 && part % g == 0) return g;
  return 2;
}

comm::WorkHandle quantized_allgather(comm::Communicator& comm, Device& device, const void* src, void* dst,
                                     int64_t count, DType type) {
  const int parts = comm.size(), rank = comm.rank();
  const int64_t groups = hd::qwz_group_count(count);
  DSCPP_CHECK(hd::quant_group_size_ok(count, groups));
  DeviceBuffer q(device, static_cast<size_t>(parts * count), MemCategory::buffers);
  DeviceBuffer scales(device, static_cast<size_t>(parts * groups) * sizeof(float), MemCategory::buffers);
  // Quantized straight into this rank's slots, then gathered in place.
  int8_t* my_q = q.as<int8_t>() + rank * count;
  float* my_scales = scales.as<float>() + rank * groups;
  kernels::DeviceMath& math = kernels::math_of(device);
  math.quantize_int8_groups(src, type, count, groups, my_q, my_scales);
  comm::WorkHandle data = comm.allgather_async(my_q, q.data(), static_cast<size_t>(count), DType::i8);
  comm::WorkHandle sc = comm.allgather_async(my_scales, scales.data(), static_cast<size_t>(groups), DType::f32);
  return std::make_shared<QuantizedGather>(math, std::move(q), std::move(scales), std::move(data), std::move(sc), dst,
                                           count, groups, parts, type);
}

namespace {

// One quantized slice on the wire: part/2 bytes of int4 pairs, then its fp32 group scales.
struct Packet {
  kernels::DeviceMath* math = nullptr;
  int64_t part = 0, group = 0;
  int64_t data_bytes() const { return part / 2; }
  int64_t bytes() const { return data_bytes() + part / group * static_cast<int64_t>(sizeof(float)); }
  void pack(const void* x, DType type, char* out) const {
    math->quantize_int4_groups(x, type, part, group, reinterpret_cast<uint8_t*>(out),
                                  reinterpret_cast<float*>(out + data_bytes()));
  }
  void add_to(const char* in, float* acc) const {
    math->dequantize_int4_add(reinterpret_cast<const uint8_t*>(in),
                                 reinterpret_cast<const float*>(in + data_bytes()), part, group, acc);
  }
};

class QuantizedReduceScatter final : public comm::Work {
 public:
  QuantizedReduceScatter(comm::Communicator& node, comm::Communicator& cross, Device& device, const void* input,
                         void* out, int64_t part, DType type)
      : cross_(cross), device_(device), out_(out), type_(type), node_size_(node.size()),
        packet_{&kernels::math_of(device), part, qgz_group_size(part)} {
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
    packet_.math->fill(sums, 0.0f, P);
    for (int64_t a = 0; a < N; ++a) packet_.add_to(recv2.as<char>() + a * pkt, sums);
    packet_.math->store_from_f32(out_, type_, sums, P);
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
