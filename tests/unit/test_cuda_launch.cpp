// The launch arithmetic of the CUDA kernels (kernels/cuda/launch.h) and the .cu sources
// themselves, compiled as C++ against the recording host stub (launch_host_stub.h): every
// thread of each launch runs on the CPU through the same index loops as on the GPU, so grid
// sizes, multi-tensor chunking and vector-width tails are exercised for real. Each kernel's
// result is compared with the CPU implementation (kernels/cpu), which calls the same shared
// element functions: bit for bit where both evaluate the same operations in the same order.
#include "core/half.h"
#include "kernels/cpu/amp/amp_cpu.h"
#include "kernels/cpu/optim/optim_cpu.h"
#include "kernels/cpu/quant/quant_cpu.h"
#include "kernels/cuda/amp.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/quant.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <utility>
#include <vector>

using namespace dscpp;
using namespace dscpp::cuda;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Sizes around the vector width, the block and the grid cap's edges.
const int64_t kSizes[] = {1, 3, 4, 5, 255, 1024, 1027, 4099, 70001};

}  // namespace

TEST_CASE("elementwise_shape: one step covers n, no idle block, capped grid", "[cuda_launch]") {
  STATIC_REQUIRE(elementwise_shape(0).blocks == 0);
  CHECK(elementwise_shape(1).blocks == 1);
  CHECK(elementwise_shape(int64_t(kThreads) * kVec).blocks == 1);
  CHECK(elementwise_shape(int64_t(kThreads) * kVec + 1).blocks == 2);
  CHECK(elementwise_shape(int64_t(1) << 40).blocks == kMaxBlocks);  // > 2^32 elements
  for (int64_t n = 1; n < 100000; n += 997) {
    const Shape s = elementwise_shape(n);
    REQUIRE(int64_t(s.blocks) * s.threads * kVec >= n);
    REQUIRE(int64_t(s.blocks - 1) * s.threads * kVec < n);
  }
}

TEST_CASE("64-bit indices from the first n whose last grid step would pass INT32_MAX", "[cuda_launch]") {
  const Shape cap{kMaxBlocks, kThreads};
  const int64_t edge = int64_t(INT32_MAX) - int64_t(kMaxBlocks) * kThreads * kVec;
  CHECK_FALSE(needs_64bit_index(edge, cap));
  CHECK(needs_64bit_index(edge + 1, cap));
  CHECK(needs_64bit_index(int64_t(1) << 31, elementwise_shape(int64_t(1) << 31)));
  CHECK_FALSE(needs_64bit_index(1 << 20, elementwise_shape(1 << 20)));
}

TEST_CASE("divmod: 32-bit arithmetic where both fit, 64-bit beyond, the same quotient and remainder", "[cuda_launch]") {
  const int64_t big = int64_t(1) << 40;
  for (int64_t a :
       {int64_t(0), int64_t(1), int64_t(767), int64_t(768), int64_t(INT32_MAX), int64_t(INT32_MAX) + 1, big + 12345})
    for (int64_t b : {int64_t(1), int64_t(3), int64_t(768), int64_t(INT32_MAX), int64_t(INT32_MAX) + 2}) {
      CAPTURE(a, b);
      const QuotRem qr = divmod(a, b);
      CHECK(qr.quot == a / b);
      CHECK(qr.rem == a % b);
    }
}

TEST_CASE("for_each_element visits every index once, tails included, for any grid", "[cuda_launch]") {
  for (int64_t n : kSizes) {
    for (Shape s : {elementwise_shape(n), Shape{1, 1}, Shape{2, 3}, Shape{7, 32}}) {
      CAPTURE(n, s.blocks, s.threads);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      auto mark = [&](int64_t i) { ++seen[static_cast<size_t>(i)]; };
      for (unsigned b = 0; b < s.blocks; ++b)
        for (unsigned t = 0; t < s.threads; ++t) for_each_element(Thread{b, t, s.blocks, s.threads}, n, mark);
      REQUIRE(std::count(seen.begin(), seen.end(), 1) == n);
    }
  }
}

TEST_CASE("block_slice tiles [0, n) in order", "[cuda_launch]") {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(1) << 33}) {
    const unsigned blocks = reduce_blocks(n);
    REQUIRE(blocks >= 1);
    REQUIRE(blocks <= kReduceBlocks);
    int64_t next = 0;
    for (unsigned b = 0; b < blocks; ++b) {
      const Range r = block_slice(n, b, blocks);
      REQUIRE(r.begin == next);
      REQUIRE(r.end >= r.begin);
      next = r.end;
    }
    CHECK(next == n);
  }
}

namespace {

// Plans a multi-tensor apply over `sizes` at depth 4 and checks every (tensor, chunk) is
// launched exactly once within the per-launch limits; returns the launches' block counts.
std::vector<int> check_plan(const std::vector<int64_t>& sizes) {
  std::vector<void*> fake(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) fake[k] = reinterpret_cast<void*>(0x1000 * (k + 1));
  void* const* ptrs[4] = {fake.data(), fake.data(), fake.data(), fake.data()};
  std::map<std::pair<int, int64_t>, int> chunks;
  std::vector<int> launches;
  plan_multi_tensor<4>(int(sizes.size()), ptrs, sizes.data(), [&](const TensorList<4>& l, int blocks) {
    REQUIRE(blocks > 0);
    REQUIRE(blocks <= kMaxChunkBlocks);
    launches.push_back(blocks);
    for (int b = 0; b < blocks; ++b) {
      const int slot = l.block_slot[b];
      REQUIRE(slot < TensorList<4>::kMaxTensors);
      const int k = l.tensor[slot];
      REQUIRE(l.ptr[2][slot] == fake[static_cast<size_t>(k)]);
      REQUIRE(l.size[slot] == sizes[static_cast<size_t>(k)]);
      ++chunks[{k, l.block_chunk[b]}];
    }
  });
  int64_t expected = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t c = ceil_div(sizes[k], kChunk);
    expected += c > 0 ? c : 0;
    for (int64_t j = 0; j < c; ++j) REQUIRE(chunks[{int(k), j}] == 1);
  }
  CHECK(int64_t(chunks.size()) == expected);
  return launches;
}

}  // namespace

TEST_CASE("plan_multi_tensor: chunks of 65,536, tensor and block limits, split tensors", "[cuda_launch]") {
  CHECK(check_plan({}).empty());
  CHECK(check_plan({0, 0}).empty());
  CHECK(check_plan({1}) == std::vector<int>{1});
  CHECK(check_plan({kChunk, kChunk + 1}) == std::vector<int>{3});
  // 100 small tensors at depth 4 (36 per launch): 36 + 36 + 28 blocks.
  CHECK(check_plan(std::vector<int64_t>(100, 10)) == (std::vector<int>{36, 36, 28}));
  // One tensor of 700 chunks (and a bit): 320 + 320 + 61, continuing as slot 0.
  CHECK(check_plan({700 * kChunk + 5}) == (std::vector<int>{320, 320, 61}));
  // Mixed, with empty tensors in between and a large one straddling a launch boundary.
  check_plan({5, 0, 300 * kChunk, 3, 0, 50 * kChunk - 1, 17, 0});
}

namespace {
// Row sums and maxima through launch_rows: exact in double for these small integers.
struct RowStats {
  static constexpr int kRounds = 2;
  const float* x;
  double* out;  // [rows][2]
  int64_t cols;
  double partial(const Thread& t, int round, const double*) const {
    double acc = round == 0 ? 0.0 : -1e300;
    for (int64_t c = t.thread; c < cols; c += t.threads) {
      const double v = x[int64_t(t.block) * cols + c];
      acc = round == 0 ? acc + v : (v > acc ? v : acc);
    }
    return acc;
  }
  static double combine(int r, double a, double b) { return r == 0 ? a + b : (a > b ? a : b); }
  void finish(const Thread& t, const double* totals) const {
    if (t.thread == 0) out[2 * t.block] = totals[0], out[2 * t.block + 1] = totals[1];
  }
};
}  // namespace

TEST_CASE("launch_rows: a warp per row up to kWarpRowMax columns, a block per row beyond", "[cuda_launch]") {
  for (int64_t cols : {int64_t(1), int64_t(33), int64_t(768), kWarpRowMax, kWarpRowMax + 1}) {
    CAPTURE(cols);
    const int64_t rows = 19;
    std::vector<float> x(size_t(rows * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int64_t(i * 7919 % 1000) - 500);
    std::vector<double> got(size_t(2 * rows), -1.0);
    stub_launches().clear();
    REQUIRE(launch_rows(unsigned(rows), cols, nullptr, RowStats{x.data(), got.data(), cols}) == kOk);
    REQUIRE(stub_launches().size() == 1);
    CHECK(stub_launches()[0].kind == (cols <= kWarpRowMax ? "warp_rows" : "block_reduce"));
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, max = -1e300;
      for (int64_t c = 0; c < cols; ++c)
        sum += x[size_t(r * cols + c)], max = std::max(max, double(x[size_t(r * cols + c)]));
      CHECK(got[size_t(2 * r)] == sum);
      CHECK(got[size_t(2 * r + 1)] == max);
    }
  }
}

namespace {
// A tile body (launch.h's contract): per step, phase 0 stores each thread's element times
// (step + 1) in shared memory and phase 1 adds the mirrored thread's into a per-thread sum, so
// every phase reads what other threads wrote in the phase before. Thread 0 sets the step count
// in begin; `uneven` gives thread 5 another count, which breaks the contract; `unwritten` makes
// phase 1 read an element nobody stored.
struct MirrorSum {
  static constexpr unsigned kThreads = 64;
  static constexpr int kPhases = 2;
  struct Shared {
    float x[kThreads];
    float never_written;
    int32_t steps;
  };
  struct Local {
    float sum;
  };
  const float* in;
  float* out;
  int steps_wanted;
  bool uneven = false, unwritten = false;
  void begin(const Thread& t, Shared& sh, Local& loc) const {
    loc.sum = 0.0f;
    if (t.thread == 0) sh.steps = steps_wanted;
  }
  int steps(const Thread& t, const Shared& sh) const { return uneven && t.thread == 5 ? sh.steps + 1 : sh.steps; }
  void phase(int p, const Thread& t, int step, Shared& sh, Local& loc) const {
    if (p == 0) sh.x[t.thread] = in[t.block * kThreads + t.thread] * float(step + 1);
    if (p == 1) loc.sum += unwritten ? sh.never_written : sh.x[kThreads - 1 - t.thread];
  }
  void end(const Thread& t, const Shared&, Local& loc) const { out[t.block * kThreads + t.thread] = loc.sum; }
};
}  // namespace

TEST_CASE("launch_tiles: phases run on every thread of a block before the next; shared memory starts as NaN",
          "[cuda_launch]") {
  const unsigned blocks = 3, n = blocks * MirrorSum::kThreads;
  std::vector<float> in(n), out(n, -1.0f);
  for (unsigned i = 0; i < n; ++i) in[i] = float(i) - 40.0f;
  stub_launches().clear();
  REQUIRE(launch_tiles(blocks, nullptr, MirrorSum{in.data(), out.data(), 4}) == kOk);
  REQUIRE(stub_launches().size() == 1);
  CHECK(stub_launches()[0].kind == "tiles");
  CHECK(stub_launches()[0].blocks == blocks);
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < MirrorSum::kThreads; ++t)  // Σ over 4 steps of (step + 1)·mirror = 10·mirror
      CHECK(out[b * MirrorSum::kThreads + t] == 10.0f * in[b * MirrorSum::kThreads + MirrorSum::kThreads - 1 - t]);
  MirrorSum none{in.data(), out.data(), 0};
  REQUIRE(launch_tiles(blocks, nullptr, none) == kOk);
  CHECK(out[7] == 0.0f);  // no steps: begin and end only
  MirrorSum uneven{in.data(), out.data(), 2};
  uneven.uneven = true;
  CHECK(launch_tiles(blocks, nullptr, uneven) != kOk);
  MirrorSum unwritten{in.data(), out.data(), 1};
  unwritten.unwritten = true;
  REQUIRE(launch_tiles(blocks, nullptr, unwritten) == kOk);
  CHECK(std::isnan(out[0]));
}

// Aligned buffers take the quad loop (four quads loaded per call, then single quads, then the
// n mod 4 tail); a source one element off 16-byte alignment takes the scalar loop. Both give
// every element the CPU's bits.
TEST_CASE("cast kernels (host stub) equal the CPU conversions bit for bit", "[cuda_launch]") {
  for (int64_t n : kSizes)
    for (int64_t shift : {0, 1}) {
      CAPTURE(n, shift);
      std::vector<float> storage(static_cast<size_t>(n + 4));
      const auto r = ops_check::rnd(n, 1, -70000.0f, 70000.0f);
      std::copy(r.begin(), r.end(), storage.begin() + shift);
      const float* x = storage.data() + shift;
      std::vector<uint16_t> h(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      std::vector<float> back(static_cast<size_t>(n));
      stub_launches().clear();
      REQUIRE(launch_cast_f32_to_f16(x, h.data(), size_t(n), nullptr) == kOk);
      REQUIRE(launch_cast_f32_to_bf16(x, b.data(), size_t(n), nullptr) == kOk);
      if (n > 0) {
        REQUIRE(stub_launches().size() == 2);
        CHECK(stub_launches()[0].kind == (shift == 0 ? "quads" : "elementwise"));
        CHECK(stub_launches()[0].blocks == (shift == 0 ? quad_shape(n) : elementwise_shape(n)).blocks);
      }
      for (size_t i = 0; i < size_t(n); ++i) {
        REQUIRE(h[i] == float_to_fp16_bits(x[i]));
        REQUIRE(b[i] == float_to_bf16_bits(x[i]));
      }
      REQUIRE(launch_cast_f16_to_f32(h.data(), back.data(), size_t(n), nullptr) == kOk);
      for (size_t i = 0; i < size_t(n); ++i) {
        const float want = fp16_bits_to_float(h[i]);
        REQUIRE(std::memcmp(&back[i], &want, sizeof want) == 0);
      }
    }
  stub_launches().clear();
  CHECK(launch_cast_f32_to_f16(nullptr, nullptr, 0, nullptr) == kOk);
  CHECK(stub_launches().empty());  // n = 0 launches nothing
}

TEST_CASE("amp kernels (host stub) equal the CPU amp loops", "[cuda_launch]") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    const auto g = ops_check::rnd(n, 2, -3.0f, 3.0f);
    auto base = ops_check::rnd(n, 3, -3.0f, 3.0f);
    std::vector<uint16_t> dev(base.size()), cpu(base.size());
    kernels::store_from_f32(cpu.data(), DType::f16, base.data(), n);
    REQUIRE(cuda::convert_into(dev.data(), Storage::f16, base.data(), Storage::f32, n, nullptr) == kOk);
    REQUIRE(dev == cpu);
    kernels::accumulate_into(cpu.data(), DType::f16, g.data(), n);
    REQUIRE(cuda::accumulate_into(dev.data(), Storage::f16, g.data(), n, nullptr) == kOk);
    REQUIRE(dev == cpu);

    // Unscale with the fused overflow flag: clean, then with an inf in the tail.
    int32_t flag = 0;
    kernels::scale_inplace(cpu.data(), DType::f16, 0.5f, n);
    REQUIRE(cuda::unscale_check(dev.data(), Storage::f16, 0.5f, n, &flag, nullptr) == kOk);
    REQUIRE(dev == cpu);
    CHECK(flag == 0);
    dev.back() = 0x7c00;  // +inf in fp16
    REQUIRE(cuda::unscale_check(dev.data(), Storage::f16, 0.5f, n, &flag, nullptr) == kOk);
    CHECK(flag == 1);

    // Global-norm partials: their in-order sum equals the CPU's sum of squares to fp64 rounding.
    std::vector<double> partials(sum_squares_blocks(n), -1.0);
    REQUIRE(cuda::sum_squares_partials(g.data(), Storage::f32, n, partials.data(), nullptr) == kOk);
    double total = 0;
    for (double p : partials) total += p;
    CHECK(total == Approx(kernels::sum_squares(g.data(), DType::f32, n)).epsilon(1e-13));
  }
}

TEST_CASE("multi-tensor optimizers (host stub) equal the CPU loops bit for bit", "[cuda_launch]") {
  // 40 tensors (two launches at depth 4) of awkward sizes, one spanning several chunks.
  std::vector<int64_t> sizes;
  for (int k = 0; k < 40; ++k) sizes.push_back(k == 7 ? 2 * kChunk + 3 : 1 + 37 * k);
  struct Set {
    std::vector<std::vector<float>> w, g, m, v;
  };
  auto make = [&](uint32_t seed) {
    Set s;
    for (size_t k = 0; k < sizes.size(); ++k) {
      s.w.push_back(ops_check::rnd(sizes[k], seed + 4 * uint32_t(k)));
      s.g.push_back(ops_check::rnd(sizes[k], seed + 4 * uint32_t(k) + 1));
      s.m.push_back(ops_check::rnd(sizes[k], seed + 4 * uint32_t(k) + 2, -0.1f, 0.1f));
      s.v.push_back(ops_check::rnd(sizes[k], seed + 4 * uint32_t(k) + 3, 0.0f, 0.01f));
    }
    return s;
  };
  auto lists = [&](Set& s, std::vector<float*>& w, std::vector<const void*>& g, std::vector<float*>& m,
                   std::vector<float*>& v) {
    for (size_t k = 0; k < sizes.size(); ++k)
      w.push_back(s.w[k].data()), g.push_back(s.g[k].data()), m.push_back(s.m[k].data()), v.push_back(s.v[k].data());
    TensorLists t;
    t.count = int(sizes.size());
    t.sizes = sizes.data();
    t.w = w.data(), t.g = g.data(), t.s1 = m.data(), t.s2 = v.data();
    return t;
  };
  kernels::cpu::set_optimizer_simd_level("scalar");  // the SIMD levels are bit-identical to it (test_optimizers)

  SECTION("Adam, AdamW, SGD, Adagrad, Lion") {
    for (int rule = 0; rule < 5; ++rule) {
      CAPTURE(rule);
      Set dev = make(10), cpu = make(10);
      std::vector<float*> w, m, v;
      std::vector<const void*> g;
      const TensorLists t = lists(dev, w, g, m, v);
      stub_launches().clear();
      for (size_t k = 0; k < sizes.size(); ++k) {
        float *cw = cpu.w[k].data(), *cm = cpu.m[k].data(), *cv = cpu.v[k].data();
        const float* cg = cpu.g[k].data();
        const int64_t n = sizes[k];
        switch (rule) {
          case 0:
            kernels::cpu::adam_step(cw, cg, cm, cv, n,
                                    kernels::adam_coeffs(0.01, 0.9, 0.999, 1e-8, 0.1, true, false, 3));
            break;
          case 1:
            kernels::cpu::adam_step(cw, cg, cm, cv, n,
                                    kernels::adam_coeffs(0.01, 0.9, 0.999, 1e-8, 0.1, true, true, 3));
            break;
          case 2:
            kernels::cpu::sgd_step(cw, cg, cm, n, kernels::sgd_coeffs(0.1, 0.9, 0.1, 0.01, true, false, false));
            break;
          case 3:
            kernels::cpu::adagrad_step(cw, cg, cv, n, kernels::adagrad_coeffs(0.1, 0.01, 1e-10, 0.01, false, 2));
            break;
          case 4:
            kernels::cpu::lion_step(cw, cg, cm, n, kernels::lion_coeffs(0.01, 0.9, 0.99, 0.1));
            break;
        }
      }
      TensorLists td = t;
      switch (rule) {
        case 0:
          REQUIRE(adam_step(t, kernels::adam_coeffs(0.01, 0.9, 0.999, 1e-8, 0.1, true, false, 3), nullptr) == kOk);
          break;
        case 1:
          REQUIRE(adam_step(t, kernels::adam_coeffs(0.01, 0.9, 0.999, 1e-8, 0.1, true, true, 3), nullptr) == kOk);
          break;
        case 2:
          REQUIRE(sgd_step(t, kernels::sgd_coeffs(0.1, 0.9, 0.1, 0.01, true, false, false), nullptr) == kOk);
          break;
        case 3:
          td.s1 = td.s2;  // Adagrad's sum lives in list 3 of the CPU call above (v)
          REQUIRE(adagrad_step(td, kernels::adagrad_coeffs(0.1, 0.01, 1e-10, 0.01, false, 2), nullptr) == kOk);
          break;
        case 4:
          REQUIRE(lion_step(t, kernels::lion_coeffs(0.01, 0.9, 0.99, 0.1), nullptr) == kOk);
          break;
      }
      CHECK(stub_launches().size() == (rule == 0 || rule == 1 ? 2u : 1u));  // depth 3 holds 48 tensors
      for (size_t k = 0; k < sizes.size(); ++k) {
        CAPTURE(k);
        REQUIRE(same_bits(dev.w[k], cpu.w[k]));
        REQUIRE(same_bits(dev.m[k], cpu.m[k]));
        REQUIRE(same_bits(dev.v[k], cpu.v[k]));
      }
    }
  }

  SECTION("LAMB: one trust ratio per tensor, as the CPU's per-segment LAMB") {
    Set dev = make(20), cpu = make(20);
    std::vector<float*> w, m, v;
    std::vector<const void*> g;
    const TensorLists t = lists(dev, w, g, m, v);
    const auto c = kernels::lamb_coeffs(0.9, 0.999, 1e-6, 0.01, false);
    const double step = kernels::lamb_step_size(0.01, 0.9, 0.999, true, 2);
    std::vector<double> scratch(static_cast<size_t>(lamb_scratch_doubles(t)));
    REQUIRE(lamb_step(t, c, step, 0.01, 10.0, scratch.data(), nullptr) == kOk);
    for (size_t k = 0; k < sizes.size(); ++k) {
      CAPTURE(k);
      std::vector<double> ratio;
      kernels::cpu::lamb_step(cpu.w[k].data(), cpu.g[k].data(), cpu.m[k].data(), cpu.v[k].data(), {0, sizes[k]}, c,
                              step, 0.01, 10.0, &ratio);
      REQUIRE(same_bits(dev.m[k], cpu.m[k]));
      REQUIRE(same_bits(dev.v[k], cpu.v[k]));
      // The norms are summed in another order (fp32 blocks on the CPU, a tree of doubles
      // here), so the ratios agree to ~1e-7 and the weights to an ulp of the step.
      CHECK(scratch[k] == Approx(ratio[0]).epsilon(1e-6));
      for (size_t i = 0; i < dev.w[k].size(); ++i)
        REQUIRE(dev.w[k][i] == Approx(cpu.w[k][i]).margin(1e-8).epsilon(1e-6));
    }
  }
}

TEST_CASE("quantize kernels (host stub) equal the CPU loops bit for bit", "[cuda_launch]") {
  for (auto [n, groups] : {std::pair<int64_t, int64_t>{1, 1}, {1000, 8}, {8000 * 8, 8}, {4099, 1}}) {
    CAPTURE(n, groups);
    const auto x = ops_check::rnd(n, 5, -4.0f, 4.0f);
    std::vector<int8_t> qd(x.size()), qc(x.size());
    std::vector<float> sd(static_cast<size_t>(groups)), sc(sd.size()), bd(x.size()), bc(x.size());
    stub_launches().clear();
    REQUIRE(cuda::quantize_int8_groups(x.data(), n, groups, qd.data(), sd.data(), nullptr) == kOk);
    REQUIRE(stub_launches().at(0).blocks == unsigned(groups));
    kernels::quantize_int8_groups(x.data(), n, groups, qc.data(), sc.data());
    REQUIRE(qd == qc);
    REQUIRE(same_bits(sd, sc));
    REQUIRE(cuda::dequantize_int8_groups(qd.data(), sd.data(), n, groups, bd.data(), nullptr) == kOk);
    kernels::dequantize_int8_groups(qc.data(), sc.data(), n, groups, bc.data());
    REQUIRE(same_bits(bd, bc));
  }
  CHECK(cuda::quantize_int8_groups(nullptr, 10, 3, nullptr, nullptr, nullptr) != kOk);
}

TEST_CASE("int4 quantize kernels (host stub) equal the CPU loops bit for bit", "[cuda_launch]") {
  // (n, group): one pair; groups of an odd number of pairs; pair counts off the vector width;
  // qgZ's 256; a group wider than the block (strided pairs), with n/2 ≡ 3 mod kVec.
  const std::pair<int64_t, int64_t> shapes[] = {
      {2, 2}, {6, 6}, {30, 6}, {4106, 2}, {1290, 10}, {256 * 7, 256}, {2 * 1027 * 3, 2 * 1027}};
  for (DType type : {DType::f32, DType::f16, DType::bf16}) {
    for (auto [n, group] : shapes) {
      CAPTURE(dtype_name(type), n, group);
      const auto values = ops_check::rnd(n, 6, -4.0f, 4.0f);
      std::vector<char> x(static_cast<size_t>(n) * dtype_size(type));
      kernels::store_from_f32(x.data(), type, values.data(), n);
      const size_t groups = static_cast<size_t>(n / group);
      std::vector<uint8_t> qd(static_cast<size_t>(n / 2), 0xAA), qc(qd.size(), 0x55);
      std::vector<float> sd(groups), sc(groups);
      stub_launches().clear();
      REQUIRE(cuda::quantize_int4_groups(x.data(), kernels::storage_of(type), n, group, qd.data(), sd.data(),
                                         nullptr) == kOk);
      REQUIRE(stub_launches().at(0).blocks == unsigned(groups));
      kernels::quantize_int4_groups(x.data(), type, n, group, qc.data(), sc.data());
      REQUIRE(qd == qc);
      REQUIRE(same_bits(sd, sc));

      // Two peers' packets summed into one accumulator, as qgZ's receiving side does.
      auto acc_d = ops_check::rnd(n, 7), acc_c = acc_d;
      const auto other = ops_check::rnd(n, 8, -1.0f, 1.0f);
      std::vector<uint8_t> q2(qd.size());
      std::vector<float> s2(groups);
      kernels::quantize_int4_groups(other.data(), DType::f32, n, group, q2.data(), s2.data());
      for (auto [q, s] : {std::pair{&qd, &sd}, std::pair{&q2, &s2}}) {
        REQUIRE(cuda::dequantize_int4_add(q->data(), s->data(), n, group, acc_d.data(), nullptr) == kOk);
        kernels::dequantize_int4_add(q->data(), s->data(), n, group, acc_c.data());
      }
      REQUIRE(same_bits(acc_d, acc_c));
    }
  }
  // The CPU's contract: groups hold whole pairs and tile n.
  CHECK(cuda::quantize_int4_groups(nullptr, Storage::f32, 14, 7, nullptr, nullptr, nullptr) != kOk);
  CHECK(cuda::quantize_int4_groups(nullptr, Storage::f32, 10, 4, nullptr, nullptr, nullptr) != kOk);
  CHECK(cuda::dequantize_int4_add(nullptr, nullptr, 10, 0, nullptr, nullptr) != kOk);
  stub_launches().clear();
  CHECK(cuda::quantize_int4_groups(nullptr, Storage::f32, 0, 2, nullptr, nullptr, nullptr) == kOk);
  CHECK(stub_launches().empty());
}
