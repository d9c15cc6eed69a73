// cuBLASLt matmuls with epilogues (lt_linear.h). Row-major products are issued as their
// column-major transposes over the same memory, as the table's cuBLAS GEMMs are: a row-major
// r×c matrix with row stride ld is a column-major c×r matrix with leading dimension ld.
#include "kernels/cuda/lt_linear.h"

#include "core/knobs.h"
#include "core/log.h"
#include "kernels/cuda/compute_type.h"
#include "kernels/cuda/device_scratch.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <map>
#include <string_view>
#include <tuple>

namespace dscpp::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// The largest power of two (≤ 256) dividing every pointer: cuBLASLt picks algorithms by the
// operands' alignment, so a plan is only reused for pointers aligned at least as well.
int alignment(std::initializer_list<const void*> ptrs) {
  int a = 256;
  for (const void* p : ptrs)
    if (p != nullptr)
      while (a > 1 && reinterpret_cast<uintptr_t>(p) % uintptr_t(a) != 0) a /= 2;
  return a;
}

// One column-major product D[m×n] = op(A)·op(B) (+ C when beta = 1) with an epilogue.
struct Product {
  cublasOperation_t ta, tb;
  int64_t m, n, k, lda, ldb, ldd;
  float beta;
  cublasLtEpilogue_t epilogue;
  kernels::GemmMath math;
  Storage ab, cs;  // A and B; D (and a forward's bias)
  const void *A, *B, *bias;
  void* D;
  auto key() const {
    return std::make_tuple(int(ta), int(tb), m, n, k, lda, ldb, ldd, beta != 0.0f, int(epilogue), int(math), int(ab),
                           int(cs), alignment({A, B, D, bias}));
  }
  // fp32 operands and result take the math's compute type (TF32 under tf32 math); 16-bit
  // operands accumulate in fp32, as the table's cuBLAS GEMMs (gemm_on).
  cublasComputeType_t compute() const {
    return ab == Storage::f32 && cs == Storage::f32 ? compute_type(math) : CUBLAS_COMPUTE_32F;
  }
};

}  // namespace

struct LtLinear::Impl {
  cublasLtHandle_t handle = nullptr;
  Stream stream = nullptr;
  DeviceScratch workspace_block;
  void* workspace = nullptr;
  bool logged = false;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  std::map<decltype(std::declval<Product>().key()), Plan> plans;

  ~Impl() {
    for (auto& [k, p] : plans) {
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
      for (auto l : {p.a, p.b, p.d})
        if (l) cublasLtMatrixLayoutDestroy(l);
    }
    if (handle) cublasLtDestroy(handle);
  }

  bool note(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    if (!logged)
      log::warn("cuBLASLt {}: {}; linear layers run as GEMM + epilogue kernels where it fails", what,
                cublasLtGetStatusString(s));
    logged = true;
    return false;
  }

  Plan& plan(const Product& p) {
    auto [it, fresh] = plans.try_emplace(p.key());
    Plan& pl = it->second;
    if (!fresh) return pl;
    const int32_t ta = p.ta, tb = p.tb;
    const cublasLtEpilogue_t ep = p.epilogue;
    if (!note(cublasLtMatmulDescCreate(&pl.desc, p.compute(), CUDA_R_32F), "descriptor") ||
        !note(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa") ||
        !note(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb") ||
        !note(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), "epilogue"))
      return pl;
    // A 16-bit output's bias gradient stays fp32 (the default would be the output's type).
    if (ep == CUBLASLT_EPILOGUE_BGRADB && p.cs != Storage::f32) {
      const int32_t f32 = CUDA_R_32F;
      if (!note(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32),
                "bias gradient type"))
        return pl;
    }
    const auto rows_of = [](cublasOperation_t t, int64_t r, int64_t c) { return t == CUBLAS_OP_N ? r : c; };
    if (!note(
            cublasLtMatrixLayoutCreate(&pl.a, data_type(p.ab), rows_of(p.ta, p.m, p.k), rows_of(p.ta, p.k, p.m), p.lda),
            "layout A") ||
        !note(
            cublasLtMatrixLayoutCreate(&pl.b, data_type(p.ab), rows_of(p.tb, p.k, p.n), rows_of(p.tb, p.n, p.k), p.ldb),
            "layout B") ||
        !note(cublasLtMatrixLayoutCreate(&pl.d, data_type(p.cs), p.m, p.n, p.ldd), "layout D"))
      return pl;
    set_pointers(pl, p);
    cublasLtMatmulPreference_t pref = nullptr;
    if (!note(cublasLtMatmulPreferenceCreate(&pref), "preference")) return pl;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                         sizeof kWorkspaceBytes);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle, pl.desc, pl.a, pl.b, pl.d, pl.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    pl.ok = s == CUBLAS_STATUS_SUCCESS && found > 0;
    if (pl.ok) pl.algo = result.algo;
    return pl;  // no algorithm is not an error: this shape takes the other path
  }

  void set_pointers(Plan& pl, const Product& p) {
    if (p.bias != nullptr)
      cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias);
  }

  bool run(const Product& p) {
    Plan& pl = plan(p);
    if (!pl.ok) return false;
    set_pointers(pl, p);
    const float alpha = 1.0f;
    return note(cublasLtMatmul(handle, pl.desc, &alpha, p.A, pl.a, p.B, pl.b, &p.beta, p.D, pl.d, p.D, pl.d, &pl.algo,
                               workspace, kWorkspaceBytes, stream),
                "matmul");
  }
};

std::unique_ptr<LtLinear> LtLinear::create(Stream stream) {
  if (const char* env = knob("DSCPP_CUBLASLT"); env != nullptr && std::string_view(env) == "0") return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  if (cublasLtCreate(&impl->handle) != CUBLAS_STATUS_SUCCESS) {
    impl->handle = nullptr;
    log::warn("cuBLASLt could not start: linear layers run as GEMM + epilogue kernels");
    return nullptr;
  }
  try {
    impl->workspace = impl->workspace_block.get(kWorkspaceBytes, stream);
  } catch (const Error&) {
    return nullptr;
  }
  return std::unique_ptr<LtLinear>(new LtLinear(std::move(impl)));
}

LtLinear::LtLinear(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LtLinear::~LtLinear() = default;

// Row-major y = x·Wᵀ is column-major yᵀ[out×rows] = op_T(W_cm[in×out])·x_cm[in×rows].
bool LtLinear::forward(kernels::GemmMath math, Storage ab, Storage cs, const void* x, const void* W, const void* bias,
                       bool accumulate, void* y, int64_t rows, int64_t in, int64_t out) {
  if (bias == nullptr) return false;  // nothing to fuse: the table's plain GEMM
  const Product p{CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, in, in, out, accumulate ? 1.0f : 0.0f,
                  CUBLASLT_EPILOGUE_BIAS, math, ab, cs, W, x, bias, y};
  return impl_->run(p);
}

// Row-major dW[out×in] = dyᵀ·x is column-major dWᵀ[in×out] = x_cm[in×rows]·op_T(dy_cm[out×rows]);
// the bias gradient is B's reduction over k (= rows): one value per column of D (= out).
bool LtLinear::weight_and_bias_grad(kernels::GemmMath math, Storage ab, Storage cs, const void* dy, const void* x,
                                    void* dW, float* bias_grad, int64_t rows, int64_t in, int64_t out) {
  const Product p{CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, in, out, in, 1.0f, CUBLASLT_EPILOGUE_BGRADB, math,
                  ab, cs, x, dy, bias_grad, dW};
  return impl_->run(p);
}

}  // namespace dscpp::cuda
