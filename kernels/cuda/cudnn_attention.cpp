// cuDNN SDPA behind the flash_attention entries (cudnn_attention.h), through the cuDNN frontend's
// graph API: one forward and one backward graph per shape, built on first use.
#include "kernels/cuda/cudnn_attention.h"

#include "build_config.h"
#include "core/log.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/device_scratch.h"

#include <cuda_runtime_api.h>

#if DSCPP_HAVE_CUDNN_SDPA
// cuDNN is loaded at run time (dlopen of libcudnn.so.9, through the frontend's shim), so the
// runtime starts on machines without it and says why this path is off.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <map>
#include <tuple>
#include <vector>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's shim resolves cuDNN's symbols here
}  // namespace cudnn_frontend
#endif

namespace dscpp::cuda {

#if DSCPP_HAVE_CUDNN_SDPA
namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// The table's layouts seen as cuDNN's [batch, heads, T, head_dim]: q/k/v rows of the packed
// batch × T × 3C qkv (and dq/dk/dv of dqkv), out/dout rows of batch × T × C; statistics
// batch × heads × T (× 1).
struct Layout {
  std::vector<int64_t> dims, qkv, out, stats_dims, stats;
  explicit Layout(const CudnnAttention::Shape& s) {
    const int64_t C = s.heads * s.head_dim;
    dims = {s.batch, s.heads, s.T, s.head_dim};
    qkv = {s.T * 3 * C, s.head_dim, 3 * C, 1};
    out = {s.T * C, s.head_dim, C, 1};
    stats_dims = {s.batch, s.heads, s.T, 1};
    stats = {s.heads * s.T, s.T, 1, 1};
  }
};

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, float, int, bool>;

}  // namespace

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  Stream stream = nullptr;
  std::map<Key, std::shared_ptr<fe::graph::Graph>> graphs;  // null: cuDNN has no plan for it
  DeviceScratch qkv16, out16, dout16, dqkv16, workspace;

  ~Impl() {
    graphs.clear();
    if (handle != nullptr) fe::detail::destroy_handle(handle);
  }

  std::shared_ptr<fe::graph::Graph> graph(const Shape& s, bool backward) {
    const Key key{s.batch, s.T, s.heads, s.head_dim, s.scale, int(s.math), backward};
    if (auto it = graphs.find(key); it != graphs.end()) return it->second;
    const Layout l(s);
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(s.math == kernels::GemmMath::fp16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto input = [&](const char* name, int64_t uid, const std::vector<int64_t>& stride) {
      return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(l.dims).set_stride(stride));
    };
    auto q = input("Q", kQ, l.qkv), k = input("K", kK, l.qkv), v = input("V", kV, l.qkv);
    if (!backward) {
      auto options = fe::graph::SDPA_attributes().set_name("flash_forward").set_generate_stats(true);
      options.set_causal_mask(true).set_attn_scale(s.scale);
      auto [o, stats] = g->sdpa(q, k, v, options);
      o->set_output(true).set_dim(l.dims).set_stride(l.out).set_uid(kO);
      stats->set_output(true).set_data_type(fe::DataType_t::FLOAT).set_dim(l.stats_dims).set_stride(l.stats);
      stats->set_uid(kStats);
    } else {
      auto o = input("O", kO, l.out), dout = input("dO", kDO, l.out);
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("Stats")
                                 .set_uid(kStats)
                                 .set_dim(l.stats_dims)
                                 .set_stride(l.stats)
                                 .set_data_type(fe::DataType_t::FLOAT));
      auto options = fe::graph::SDPA_backward_attributes().set_name("flash_backward");
      options.set_causal_mask(true).set_attn_scale(s.scale);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
      dq->set_output(true).set_dim(l.dims).set_stride(l.qkv).set_uid(kDQ);
      dk->set_output(true).set_dim(l.dims).set_stride(l.qkv).set_uid(kDK);
      dv->set_output(true).set_dim(l.dims).set_stride(l.qkv).set_uid(kDV);
    }
    fe::error_t status = g->build(handle, {fe::HeurMode_t::A});
    if (!status.is_good()) {
      log::warn(
          "cuDNN SDPA has no {} plan for batch {}, T {}, {} heads of {} in {}: {}; that attention runs on "
          "dscpp's blockwise attention",
          backward ? "backward" : "forward", s.batch, s.T, s.heads, s.head_dim, kernels::gemm_math_name(s.math),
          status.get_message());
      g = nullptr;
    }
    graphs[key] = g;
    return g;
  }

  bool execute(fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, const char* what) {
    int64_t bytes = 0;
    if (!g.get_workspace_size(bytes).is_good()) return false;
    fe::error_t status = g.execute(handle, pack, workspace.get(size_t(bytes > 0 ? bytes : 1), stream));
    if (!status.is_good())
      log::warn("cuDNN SDPA {} failed: {}; running dscpp's blockwise attention", what, status.get_message());
    return status.is_good();
  }
};

namespace {
// The `n` values at src as cuDNN reads them: src itself when the table's tensors are 16-bit,
// else the fp32 values cast into `scratch` as the 16-bit type of `math` (raw bits); null when
// the launch fails.
uint16_t* staged(DeviceScratch& scratch, const void* src, size_t n, const CudnnAttention::Shape& sh, Stream s) {
  if (sh.tensors16) return static_cast<uint16_t*>(const_cast<void*>(src));
  auto* dst = scratch.get<uint16_t>(n, s);
  return launch_cast_f32_to_16(static_cast<const float*>(src), dst, n, sh.math != kernels::GemmMath::fp16, s) ==
                 cudaSuccess
             ? dst
             : nullptr;
}
// Where cuDNN writes a result that ends at dst: dst itself for 16-bit tensors, else scratch.
uint16_t* result(DeviceScratch& scratch, void* dst, size_t n, const CudnnAttention::Shape& sh, Stream s) {
  return sh.tensors16 ? static_cast<uint16_t*>(dst) : scratch.get<uint16_t>(n, s);
}
bool from16(const uint16_t* src, void* dst, size_t n, const CudnnAttention::Shape& sh, Stream s) {
  if (sh.tensors16) return true;
  return launch_cast_16_to_f32(src, static_cast<float*>(dst), n, sh.math != kernels::GemmMath::fp16, s) == cudaSuccess;
}
}  // namespace

std::unique_ptr<CudnnAttention> CudnnAttention::create(Stream stream) {
  if (fe::cudnn_dlhandle == nullptr) fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
  if (fe::cudnn_dlhandle == nullptr) {
    log::warn("cuDNN is not loadable ({}): attention runs on dscpp's blockwise attention", dlerror());
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  if (const cudnnStatus_t st = fe::detail::create_handle(&impl->handle); st != CUDNN_STATUS_SUCCESS) {
    log::warn("cuDNN could not start ({}): attention runs on dscpp's blockwise attention",
              fe::detail::get_error_string(st));
    impl->handle = nullptr;
    return nullptr;
  }
  if (fe::detail::set_stream(impl->handle, stream) != CUDNN_STATUS_SUCCESS) return nullptr;
  log::info("attention on 16-bit GEMM math: cuDNN {} SDPA (frontend {})", fe::detail::get_backend_version(),
            CUDNN_FRONTEND_VERSION);
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

// A failed allocation (an Error from DeviceScratch) is a "no": the caller runs its own kernels.
bool CudnnAttention::forward(const Shape& s, const void* qkv, float* lse, void* out) try {
  Impl& m = *impl_;
  const auto g = m.graph(s, false);
  if (!g) return false;
  const size_t n = s.elements();
  const int64_t C = s.width();
  uint16_t* q = staged(m.qkv16, qkv, 3 * n, s, m.stream);
  uint16_t* o = result(m.out16, out, n, s, m.stream);
  if (q == nullptr) return false;
  std::unordered_map<int64_t, void*> pack{{kQ, q}, {kK, q + C}, {kV, q + 2 * C}, {kO, o}, {kStats, lse}};
  return m.execute(*g, pack, "forward") && from16(o, out, n, s, m.stream);
} catch (const Error&) {
  return false;
}

bool CudnnAttention::backward(const Shape& s, const void* qkv, const void* out, const float* lse, const void* dout,
                              void* dqkv) try {
  Impl& m = *impl_;
  const auto g = m.graph(s, true);
  if (!g) return false;
  const size_t n = s.elements();
  const int64_t C = s.width();
  uint16_t* q = staged(m.qkv16, qkv, 3 * n, s, m.stream);
  uint16_t* o = staged(m.out16, out, n, s, m.stream);
  uint16_t* d = staged(m.dout16, dout, n, s, m.stream);
  uint16_t* dq = result(m.dqkv16, dqkv, 3 * n, s, m.stream);
  if (q == nullptr || o == nullptr || d == nullptr) return false;
  std::unordered_map<int64_t, void*> pack{{kQ, q},       {kK, q + C},       {kV, q + 2 * C},
                                          {kO, o},       {kDO, d},          {kDQ, dq},
                                          {kDK, dq + C}, {kDV, dq + 2 * C}, {kStats, const_cast<float*>(lse)}};
  return m.execute(*g, pack, "backward") && from16(dq, dqkv, 3 * n, s, m.stream);
} catch (const Error&) {
  return false;
}

#else  // no cuDNN frontend in this build

struct CudnnAttention::Impl {};

std::unique_ptr<CudnnAttention> CudnnAttention::create(Stream) {
  log::info(
      "attention on 16-bit GEMM math: dscpp's blockwise attention (this build has no cuDNN SDPA: the cuDNN frontend "
      "headers were not found when it was configured)");
  return nullptr;
}
bool CudnnAttention::forward(const Shape&, const void*, float*, void*) {
  return false;
}
bool CudnnAttention::backward(const Shape&, const void*, const void*, const float*, const void*, void*) {
  return false;
}

#endif

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

}  // namespace dscpp::cuda
