#include "tests/collectives/matrix.h"

#include "device/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace dscpp::test {
namespace {

using comm::ReduceOp;

// Small integers: sums over up to 8 ranks stay below 2^8, exact in bf16, fp16, fp32 and in
// any summation order, so sum/max/min must match the reference bit for bit on every engine.
double value(int seed, int rank, size_t i) {
  return static_cast<double>(static_cast<int64_t>((rank * 7 + i * 3 + static_cast<size_t>(seed)) % 11) - 5);
}

std::vector<char> encode(const std::vector<double>& v, DType t) {
  std::vector<char> out(v.size() * dtype_size(t) + 1);  // +1: a valid pointer for 0 elements
  if (t == DType::i32) {
    for (size_t i = 0; i < v.size(); ++i) reinterpret_cast<int32_t*>(out.data())[i] = static_cast<int32_t>(v[i]);
  } else {
    convert(v.data(), DType::f64, out.data(), t, v.size());
  }
  return out;
}

double decode(const std::vector<char>& b, DType t, size_t i) {
  if (t == DType::i32) return reinterpret_cast<const int32_t*>(b.data())[i];
  if (t == DType::f32) return reinterpret_cast<const float*>(b.data())[i];
  double d = 0;
  convert(b.data() + i * dtype_size(t), t, &d, DType::f64, 1);
  return d;
}

double reduce(ReduceOp op, const std::function<double(int)>& of_rank, int size) {
  double acc = of_rank(0);
  for (int r = 1; r < size; ++r) {
    double x = of_rank(r);
    acc = op == ReduceOp::max ? std::max(acc, x) : op == ReduceOp::min ? std::min(acc, x) : acc + x;
  }
  return op == ReduceOp::avg ? acc / size : acc;
}

// An operation's view of a host vector: the vector itself, or a copy in device memory that
// fetch() brings back for checking.
class Placed {
 public:
  Placed(Device* device, std::vector<char>& host) : device_(device), host_(&host) {
    if (device_ == nullptr) return;
    buffer_ = DeviceBuffer(*device_, host.size(), MemCategory::buffers);
    device_->copy_from_host(buffer_.data(), host.data(), host.size());
  }
  char* data() const { return device_ != nullptr ? buffer_.as<char>() : host_->data(); }
  std::vector<char>& fetch() {
    if (device_ != nullptr) device_->copy_to_host(host_->data(), buffer_.data(), host_->size());
    return *host_;
  }

 private:
  Device* device_;
  std::vector<char>* host_;
  DeviceBuffer buffer_;
};

struct Checker {
  comm::Communicator& comm;
  Device* device = nullptr;
  size_t checks = 0;

  void expect(const std::vector<char>& got, DType t, size_t n, const std::function<double(size_t)>& want,
              const std::string& what, double rel_tol = 0) {
    for (size_t i = 0; i < n; ++i) {
      double g = decode(got, t, i), w = want(i);
      // The reference is rounded to the result type the same way the engine must round.
      double wr = t == DType::f64 ? w : t == DType::f32 ? static_cast<float>(w) : decode(encode({w}, t), t, 0);
      if (std::fabs(g - wr) > rel_tol * std::max(1.0, std::fabs(wr)))
        fail("{} ({} x {}, group '{}' of {} on {}): element {} is {} on rank {}, expected {}", what, n,
             dtype_name(t), comm.group_name(), comm.size(), comm.backend_name(), i, g, comm.rank(), wr);
    }
    ++checks;
  }

  std::vector<double> input(int seed, int rank, size_t n) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = value(seed, rank, i);
    return v;
  }

  void run(DType t, size_t count, int seed) {
    const int n = comm.size(), me = comm.rank();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
      auto host = encode(input(seed, me, count), t);
      Placed buf(device, host);
      comm.allreduce(buf.data(), count, t, op);
      expect(buf.fetch(), t, count, [&](size_t i) { return reduce(op, [&](int r) { return value(seed, r, i); }, n); },
             fmt::format("allreduce {}", comm::reduce_op_name(op)), op == ReduceOp::avg ? avg_tolerance(t) : 0);
    }
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      auto host_in = encode(input(seed + 1, me, count * n), t);
      auto host_out = encode(std::vector<double>(count, -99), t);
      Placed in(device, host_in), out(device, host_out);
      comm.reduce_scatter(in.data(), out.data(), count, t, op);
      if (in.fetch() != encode(input(seed + 1, me, count * n), t))
        fail("reduce_scatter {} ({} x {}, group '{}' on {}): the input buffer was modified on rank {}",
             comm::reduce_op_name(op), count, dtype_name(t), comm.group_name(), comm.backend_name(), me);
      expect(out.fetch(), t, count,
             [&](size_t i) { return reduce(op, [&](int r) { return value(seed + 1, r, me * count + i); }, n); },
             fmt::format("reduce_scatter {}", comm::reduce_op_name(op)), op == ReduceOp::avg ? avg_tolerance(t) : 0);
    }
    auto gather_want = [&](size_t i) {
      return value(seed + 2, static_cast<int>(i / std::max<size_t>(count, 1)), i % std::max<size_t>(count, 1));
    };
    {
      auto host_in = encode(input(seed + 2, me, count), t);
      auto host_out = encode(std::vector<double>(count * n, -99), t);
      Placed in(device, host_in), out(device, host_out);
      comm.allgather(in.data(), out.data(), count, t);
      expect(out.fetch(), t, count * n, gather_want, "allgather");
      // In place: this rank's input already sits at its slice of the output.
      auto host_both = encode(std::vector<double>(count * n, -99), t);
      std::memcpy(host_both.data() + me * count * dtype_size(t), host_in.data(), count * dtype_size(t));
      Placed both(device, host_both);
      comm.allgather(both.data() + me * count * dtype_size(t), both.data(), count, t);
      expect(both.fetch(), t, count * n, gather_want, "allgather in place");
    }
    for (int root : {n - 1, 0}) {
      auto host = encode(input(seed + 3 + root, me, count), t);
      Placed buf(device, host);
      comm.broadcast(buf.data(), count, t, root);
      expect(buf.fetch(), t, count, [&](size_t i) { return value(seed + 3 + root, root, i); },
             fmt::format("broadcast from {}", root));
    }
    {
      // Rank r's slice j is value(seed+9, r, j*count+i): rank me receives slice me from each r.
      auto host_in = encode(input(seed + 9, me, count * n), t);
      auto host_out = encode(std::vector<double>(count * n, -99), t);
      Placed in(device, host_in), out(device, host_out);
      comm.all_to_all(in.data(), out.data(), count, t);
      expect(out.fetch(), t, count * n,
             [&](size_t i) {
               size_t c = std::max<size_t>(count, 1);
               return value(seed + 9, static_cast<int>(i / c), me * count + i % c);
             },
             "all_to_all");
    }
  }

  // Several operations in flight while this thread computes: results must be the same as
  // when issued one by one, and complete in issue order.
  void run_async(size_t count) {
    const int n = comm.size(), me = comm.rank();
    std::vector<std::vector<char>> bufs(4);
    std::vector<Placed> placed;
    std::vector<comm::WorkHandle> work;
    for (int k = 0; k < 4; ++k) {
      bufs[k] = encode(input(40 + k, me, count), DType::f32);
      placed.emplace_back(device, bufs[k]);
      work.push_back(comm.allreduce_async(placed.back().data(), count, DType::f32));
    }
    auto host_gin = encode(input(50, me, count), DType::f32);
    auto host_gout = encode(std::vector<double>(count * n, -99), DType::f32);
    Placed gin(device, host_gin), gout(device, host_gout);
    work.push_back(comm.allgather_async(gin.data(), gout.data(), count, DType::f32));
    volatile double sink = 0;
    for (int i = 0; i < 2000000; ++i) sink = sink + std::sin(i * 1e-6);
    work.back()->wait();
    for (auto& w : work) {
      if (!w->done()) fail("async: an operation issued earlier was not done when a later one finished");
      w->wait();
    }
    for (int k = 0; k < 4; ++k)
      expect(placed[k].fetch(), DType::f32, count,
             [&](size_t i) { return reduce(ReduceOp::sum, [&](int r) { return value(40 + k, r, i); }, n); },
             "async allreduce");
    expect(gout.fetch(), DType::f32, count * n,
           [&](size_t i) { return value(50, static_cast<int>(i / count), i % count); }, "async allgather");
  }
};

}  // namespace

double avg_tolerance(DType t) {
  switch (t) {
    case DType::f16: return 2.0 / 1024;
    case DType::bf16: return 2.0 / 128;
    case DType::f32: return 2.0 / (1 << 23);
    default: return 1e-14;
  }
}

size_t check_collectives(comm::Communicator& comm, const MatrixOptions& options) {
  Checker c{comm, options.device};
  int seed = 0;
  for (DType t : options.dtypes)
    for (size_t count : options.counts) c.run(t, count, seed++);
  for (size_t count : {size_t{1}, size_t{1000}}) {
    auto host = encode(c.input(70, comm.rank(), count), DType::i32);
    Placed buf(options.device, host);
    comm.allreduce(buf.data(), count, DType::i32, ReduceOp::max);
    c.expect(buf.fetch(), DType::i32, count,
             [&](size_t i) { return reduce(ReduceOp::max, [&](int r) { return value(70, r, i); }, comm.size()); },
             "allreduce max int32");
  }
  comm.barrier();
  if (options.async_overlap) c.run_async(100003);
  return c.checks;
}

}  // namespace dscpp::test
