// DeepSpeed's memory estimators against the worked example in DeepSpeed's docs
// (docs/code-docs/source/memory.rst, 2851e6 params, 32e6 largest layer, 1 node x 8 GPUs) and
// against bytes worked out by hand from the formulas of the engine reference §8.
#include "core/zero_estimate.h"

#include <catch2/catch.hpp>

#include <string>

using dscpp::estimate_zero2;
using dscpp::estimate_zero3;
using dscpp::MemEstimate;

namespace {

bool same(const MemEstimate& m, int64_t cpu, int64_t gpu) { return m.cpu_bytes == cpu && m.gpu_bytes == gpu; }

}  // namespace

TEST_CASE("ZeRO-2 worked example, digit for digit") {
  // The docs print "15.93GB" for offload_optimizer=none: that is DeepSpeed's older GPU formula
  // 4P + 16P/G = 11.404e9 + 5.702e9 = 17.106e9 B = 15.93 GiB. The code (v0.16.4) computes
  // 2P + int(18P/G) = 5.702e9 + 6.41475e9 = 12.11675e9 B = 11.28 GiB, and so do we.
  const std::string expected =
      "Estimated memory needed for params, optim states and gradients for a:\n"
      "HW: Setup with 1 node, 8 GPUs per node.\n"
      "SW: Model with 2851M total params.\n"
      "  per CPU  |  per GPU |   Options\n"
      "  127.45GB |   5.31GB | offload_optimizer=cpu \n"
      "  127.45GB |  11.28GB | offload_optimizer=none\n";
  CHECK(dscpp::format_zero2_estimates(2851e6, 8, 1) == expected);
  // The bytes behind the rows: cpu = P·max(4·8, 16)·1.5 and P·4·8·1.5; gpu = 2P and the above.
  CHECK(same(estimate_zero2(2851e6, 8, 1, true), 136'848'000'000, 5'702'000'000));
  CHECK(same(estimate_zero2(2851e6, 8, 1, false), 136'848'000'000, 12'116'750'000));
}

TEST_CASE("ZeRO-3 worked example, digit for digit") {
  const std::string expected =
      "Estimated memory needed for params, optim states and gradients for a:\n"
      "HW: Setup with 1 node, 8 GPUs per node.\n"
      "SW: Model with 2851M total params, 32M largest layer params.\n"
      "  per CPU  |  per GPU |   Options\n"
      "   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n"
      "  127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0\n"
      "   63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1\n"
      "  127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0\n"
      "    1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1\n"
      "  127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0\n";
  CHECK(dscpp::format_zero3_estimates(2851e6, 32e6, 8, 1) == expected);
  // LL = 4·32e6 = 128e6.
  CHECK(same(estimate_zero3(2851e6, 32e6, 8, 1, true, true, true), 76'977'000'000, 128'000'000));    // P·18·1·1.5
  CHECK(same(estimate_zero3(2851e6, 32e6, 8, 1, false, true, true), 68'424'000'000, 840'750'000));  // +int(2P/8)
  CHECK(same(estimate_zero3(2851e6, 32e6, 8, 1, false, false, true), 1'536'000'000, 6'542'750'000));  // Lp·4·8·1.5
}

TEST_CASE("one GPU on one node: the closed forms") {
  for (int64_t P : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{123'456'789}, int64_t{2'851'000'000}}) {
    INFO("P = " << P);
    // ZeRO-2 without offload: 2P + 18P/1 = 20P bytes on the GPU, 4·1·1.5 = 6P on the CPU.
    CHECK(same(estimate_zero2(double(P), 1, 1, false), 6 * P, 20 * P));
    // ZeRO-3 none/none with zero.Init: CPU holds 4·Lp·1.5 = 6·Lp; GPU 4·Lp + 18P.
    const int64_t Lp = P / 3 + 1;
    CHECK(same(estimate_zero3(double(P), double(Lp), 1, 1, false, false, true), 6 * Lp, 4 * Lp + 18 * P));
  }
}

TEST_CASE("int() truncates where DeepSpeed truncates") {
  // 18·7/4 = 31.5 -> 31: GPU = 2·7 + 31 = 45. CPU = 7·4·4·1.5 = 168.
  CHECK(same(estimate_zero2(7, 4, 1, false), 168, 45));
  // ZeRO-3 none/cpu: 4·3 + int(2·7/4 = 3.5) = 15; CPU P·16·1·1.5 = 168.
  CHECK(same(estimate_zero3(7, 3, 4, 1, false, true, true), 168, 15));
  // The final int() of a fractional CPU figure: 3·max(4·1, 16)·1.5 = 72; with f = 1.1, 52.8 -> 52.
  CHECK(estimate_zero2(3, 1, 1, true, 1.1).cpu_bytes == 52);
}

TEST_CASE("several nodes: gpus_factor = 1/n, max(4g, 18/n)") {
  // n = 2, g = 4, P = 1e9: zero_init CPU = P·18·0.5·1.5 = 13.5e9; without, max(16, 9) = 16 -> 24e9.
  CHECK(estimate_zero3(1e9, 1e7, 4, 2, true, true, true).cpu_bytes == 13'500'000'000);
  CHECK(estimate_zero3(1e9, 1e7, 4, 2, true, true, false).cpu_bytes == 24'000'000'000);
  // G = 8 total GPUs: ZeRO-2 offload CPU = P·max(32, 16)·1.5 = 48e9; no offload GPU = 2e9 + 2.25e9.
  CHECK(same(estimate_zero2(1e9, 4, 2, true), 48'000'000'000, 2'000'000'000));
  CHECK(estimate_zero2(1e9, 4, 2, false).gpu_bytes == 4'250'000'000);
}

TEST_CASE("header: singular and plural, GiB columns") {
  // P = 2^29: offloaded, the GPU holds 2P = 2^30 B and the CPU P·16·1.5 = 12·2^30 B: "GB" is GiB.
  std::string one = dscpp::format_zero2_estimates(536870912.0, 1, 1);
  CHECK(one.find("HW: Setup with 1 node, 1 GPU per node.\n") != std::string::npos);
  CHECK(one.find("\n   12.00GB |   1.00GB | offload_optimizer=cpu \n") != std::string::npos);
  CHECK(one.find("SW: Model with 536M total params.\n") != std::string::npos);  // int(536.870912)
  std::string many = dscpp::format_zero3_estimates(5e9, 2e8, 4, 2);
  CHECK(many.find("HW: Setup with 2 nodes, 4 GPUs per node.\n") != std::string::npos);
  CHECK(many.find("SW: Model with 5000M total params, 200M largest layer params.\n") != std::string::npos);
}

TEST_CASE("model parameter counts: total and the first largest layer") {
  auto c = dscpp::count_model_params({{"embed", 10}, {"block0", 30}, {"block1", 30}, {"head", 5}});
  CHECK(c.total == 75);
  CHECK(c.largest_layer == 30);
  CHECK(c.largest_layer_name == "block0");
  CHECK(c.layers.size() == 4);
  auto empty = dscpp::count_model_params({});
  CHECK(empty.total == 0);
  CHECK(empty.largest_layer_name.empty());
}
