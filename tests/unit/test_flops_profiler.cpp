// The flops profiler counts DeepSpeed's forward FLOPs per layer from the ops a layer calls,
// leaves the results of the real ops untouched, and ignores ops called during backward.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cpu/ops/cpu_ops.h"
#include "runtime/flops_profiler.h"

using namespace dscpp;

TEST_CASE("flops profiler: forward FLOPs per layer by DeepSpeed's rules, results unchanged", "[flops]") {
  const dscpp_ops real = kernels::cpu_ops(DSCPP_F32);
  config::FlopsProfilerConfig cfg;
  cfg.enabled = true;
  runtime::FlopsProfiler prof(real, {"a", "b"}, {100, 200}, cfg);
  const dscpp_ops& o = prof.ops();
  const int64_t M = 5, N = 7, K = 3;
  std::vector<float> A(M * K, 0.5f), B(K * N, 2.0f), C(M * N, 0.0f), C2(M * N, 0.0f), y(M * N);
  REQUIRE(o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N) == 0);
  CHECK(prof.forward_flops() == 0);  // outside any layer: not counted
  REQUIRE(real.gemm(&real, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C2.data(), N) == 0);
  CHECK(C == C2);
  prof.enter(0, false);
  o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);  // 2·5·7·3
  o.gelu_forward(&o, C.data(), y.data(), M * N);                                                       // 35
  std::vector<float> gamma(N, 1.0f), beta(N, 0.0f), mean(M), rstd(M);
  o.layernorm_forward(&o, C.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), M, N, 1e-5f);  // 5·35
  prof.leave();
  CHECK(prof.forward_flops() == 210 + 35 + 175);
  prof.enter(1, true);  // backward: DeepSpeed's profiler counts the forward pass only
  o.gemm(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
  prof.leave();
  prof.enter(1, false);
  o.gemm_strided_batched(&o, DSCPP_NO_TRANS, DSCPP_NO_TRANS, M, N, K, 1.0f, A.data(), K, 0, B.data(), N, 0, 0.0f,
                         C.data(), N, 0, 2);  // 2 × 210
  prof.leave();
  CHECK(prof.forward_flops() == 420 + 420);
  const std::string r = prof.report(0.5, 16);
  INFO(r);
  CHECK(r.find("fwd flops per rank:                               840.00") != std::string::npos);
  CHECK(r.find("samples/second:                                   32.00") != std::string::npos);
  CHECK(r.find("a ") != std::string::npos);
  prof.reset();
  CHECK(prof.forward_flops() == 0);
}
