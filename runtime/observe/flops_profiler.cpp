#include "runtime/observe/flops_profiler.h"

#include "core/error.h"
#include "core/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>

namespace dscpp::runtime {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// DeepSpeed's number formatting: 1.23 G, 4.56 T, ...
std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.2f}{}{}", v, prefixes[i], unit);
}

}  // namespace

// The profiler of this process: holders of the table (the layer runner) keep copies of it, so a
// wrapper cannot find its profiler from the table pointer it is called with.
FlopsProfiler* active = nullptr;

// Each wrapper counts the forward FLOPs of one op and calls the real table's entry.
struct Wrappers {
  static FlopsProfiler& prof(const dscpp_ops*) { return *active; }
  static const dscpp_ops* real(const dscpp_ops* o) { return &prof(o).real_; }
  static double d(int64_t v) { return static_cast<double>(v); }
  // Causal attention, counted whole as DeepSpeed's profiler counts torch's: q·kᵀ and probs·v
  // (4·B·H·T²·D) and the softmax over B·H·T² scores, whichever entry computes it.
  static double attention_flops(int64_t batch, int64_t T, int64_t heads, int64_t head_dim) {
    return 4 * d(batch) * d(heads) * d(T) * d(T) * d(head_dim) + d(batch) * d(heads) * d(T) * d(T);
  }

  static int gemm(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N, int64_t K,
                  float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
                  int64_t ldc) {
    prof(o).count(2 * d(M) * d(N) * d(K));
    return real(o)->gemm(real(o), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  static int gemm_strided_batched(const dscpp_ops* o, dscpp_transpose ta, dscpp_transpose tb, int64_t M, int64_t N,
                                  int64_t K, float alpha, const void* A, int64_t lda, int64_t sa, const void* B,
                                  int64_t ldb, int64_t sb, float beta, void* C, int64_t ldc, int64_t sc,
                                  int64_t batch) {
    prof(o).count(2 * d(M) * d(N) * d(K) * d(batch));
    return real(o)->gemm_strided_batched(real(o), ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                                         batch);
  }
  static int add(const dscpp_ops* o, const void* a, const void* b, void* y, int64_t n) {
    prof(o).count(d(n));
    return real(o)->add(real(o), a, b, y, n);
  }
  static int axpy(const dscpp_ops* o, float alpha, const void* x, void* y, int64_t n) {
    prof(o).count(2 * d(n));
    return real(o)->axpy(real(o), alpha, x, y, n);
  }
  static int scale(const dscpp_ops* o, float alpha, void* x, int64_t n) {
    prof(o).count(d(n));
    return real(o)->scale(real(o), alpha, x, n);
  }
  static int bias_add(const dscpp_ops* o, void* x, const void* bias, int64_t rows, int64_t cols) {
    prof(o).count(d(rows) * d(cols));
    return real(o)->bias_add(real(o), x, bias, rows, cols);
  }
  static int gelu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
    prof(o).count(d(n));
    return real(o)->gelu_forward(real(o), x, y, n);
  }
  static int relu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
    prof(o).count(d(n));
    return real(o)->relu_forward(real(o), x, y, n);
  }
  static int layernorm_forward(const dscpp_ops* o, const void* x, const void* gamma, const void* beta, void* y,
                               float* mean, float* rstd, int64_t rows, int64_t cols, float eps) {
    prof(o).count(5 * d(rows) * d(cols));  // DeepSpeed: 5 per element with an affine transform
    return real(o)->layernorm_forward(real(o), x, gamma, beta, y, mean, rstd, rows, cols, eps);
  }
  static int softmax_forward(const dscpp_ops* o, const void* x, void* y, int64_t rows, int64_t cols) {
    prof(o).count(d(rows) * d(cols));
    return real(o)->softmax_forward(real(o), x, y, rows, cols);
  }
  static int causal_softmax_forward(const dscpp_ops* o, const void* scores, void* probs, int64_t groups, int64_t T,
                                    float s) {
    prof(o).count(d(groups) * d(T) * d(T));
    return real(o)->causal_softmax_forward(real(o), scores, probs, groups, T, s);
  }
  // As transformers' T5 computes it, counted as DeepSpeed counts that: scores + bias one add per
  // score, the softmax one per score over the whole row (torch's masks are part of the bias).
  static int masked_softmax_forward(const dscpp_ops* o, const void* scores, const void* bias, const int32_t* key_len,
                                    int64_t key_len_ld, void* probs, int64_t batch, int64_t heads, int64_t Tq,
                                    int64_t Tk, int32_t causal) {
    prof(o).count((bias != nullptr ? 2 : 1) * d(batch) * d(heads) * d(Tq) * d(Tk));
    return real(o)->masked_softmax_forward(real(o), scores, bias, key_len, key_len_ld, probs, batch, heads, Tq, Tk,
                                           causal);
  }
  static int cross_entropy_forward(const dscpp_ops* o, const void* logits, const int32_t* targets, void* probs,
                                   int64_t rows, int64_t cols, double* loss_sum, int64_t* counted, int64_t* correct) {
    prof(o).count(d(rows) * d(cols));  // the softmax; the log and the pick are per row
    return real(o)->cross_entropy_forward(real(o), logits, targets, probs, rows, cols, loss_sum, counted, correct);
  }
  static int causal_attention_forward(const dscpp_ops* o, const void* qkv, void* probs, void* out, int64_t batch,
                                      int64_t T, int64_t heads, int64_t head_dim, float s) {
    prof(o).count(attention_flops(batch, T, heads, head_dim));
    return real(o)->causal_attention_forward(real(o), qkv, probs, out, batch, T, heads, head_dim, s);
  }
  static int flash_attention_forward(const dscpp_ops* o, const void* qkv, float* lse, void* out, int64_t batch,
                                     int64_t T, int64_t heads, int64_t head_dim, float s) {
    prof(o).count(attention_flops(batch, T, heads, head_dim));  // as causal_attention_forward
    return real(o)->flash_attention_forward(real(o), qkv, lse, out, batch, T, heads, head_dim, s);
  }
  static int flash_attention_masked_forward(const dscpp_ops* o, const void* qkv, const int32_t* first_key,
                                            int64_t first_key_ld, float* lse, void* out, int64_t batch, int64_t T,
                                            int64_t heads, int64_t head_dim, float s) {
    // Counted as causal: the kernels compute every causal score and zero the ones the mask hides.
    prof(o).count(attention_flops(batch, T, heads, head_dim));
    return real(o)->flash_attention_masked_forward(real(o), qkv, first_key, first_key_ld, lse, out, batch, T, heads,
                                                   head_dim, s);
  }
  static int mul(const dscpp_ops* o, const void* a, const void* b, void* y, int64_t n) {
    prof(o).count(d(n));
    return real(o)->mul(real(o), a, b, y, n);
  }
  static int silu_forward(const dscpp_ops* o, const void* x, void* y, int64_t n) {
    prof(o).count(d(n));
    return real(o)->silu_forward(real(o), x, y, n);
  }
  static int swiglu_forward(const dscpp_ops* o, const void* gate, const void* up, void* y, int64_t n) {
    prof(o).count(2 * d(n));  // the SiLU and the product
    return real(o)->swiglu_forward(real(o), gate, up, y, n);
  }
  static int rmsnorm_forward(const dscpp_ops* o, const void* x, const void* gamma, void* y, float* rstd, int64_t rows,
                             int64_t cols, float eps) {
    prof(o).count(4 * d(rows) * d(cols));  // square, sum, scale, weight
    return real(o)->rmsnorm_forward(real(o), x, gamma, y, rstd, rows, cols, eps);
  }
  static int linear_forward(const dscpp_ops* o, const void* x, const void* W, const void* bias, const void* residual,
                            void* y, void* gelu_out, int64_t rows, int64_t in, int64_t out) {
    const double outputs = d(rows) * d(out);
    prof(o).count(2 * outputs * d(in) + (bias ? outputs : 0) + (residual ? outputs : 0) + (gelu_out ? outputs : 0));
    return real(o)->linear_forward(real(o), x, W, bias, residual, y, gelu_out, rows, in, out);
  }
};

FlopsProfiler::FlopsProfiler(const dscpp_ops& real, std::vector<std::string> layer_names,
                             std::vector<int64_t> layer_params, const config::FlopsProfilerConfig& config)
    : real_(real),
      names_(std::move(layer_names)),
      params_(std::move(layer_params)),
      config_(config),
      layers_(names_.size()) {
  DSCPP_CHECK_EQ(names_.size(), params_.size());
  DSCPP_CHECK(active == nullptr);  // one engine per process
  active = this;
  table_ = real;
  dscpp_ops& t = table_;
  // Entries the plugin's table lacks (null) stay null.
  auto wrap = [](auto& slot, auto fn) {
    if (slot) slot = fn;
  };
  wrap(t.gemm, &Wrappers::gemm);
  wrap(t.gemm_strided_batched, &Wrappers::gemm_strided_batched);
  wrap(t.add, &Wrappers::add);
  wrap(t.axpy, &Wrappers::axpy);
  wrap(t.scale, &Wrappers::scale);
  wrap(t.bias_add, &Wrappers::bias_add);
  wrap(t.gelu_forward, &Wrappers::gelu_forward);
  wrap(t.relu_forward, &Wrappers::relu_forward);
  wrap(t.layernorm_forward, &Wrappers::layernorm_forward);
  wrap(t.softmax_forward, &Wrappers::softmax_forward);
  wrap(t.causal_softmax_forward, &Wrappers::causal_softmax_forward);
  wrap(t.masked_softmax_forward, &Wrappers::masked_softmax_forward);
  // relative_bias_forward is an embedding lookup (T5's nn.Embedding of buckets), which counts
  // none, as embedding_forward; relative_bias_backward is a backward op.
  wrap(t.cross_entropy_forward, &Wrappers::cross_entropy_forward);
  wrap(t.causal_attention_forward, &Wrappers::causal_attention_forward);
  wrap(t.flash_attention_forward, &Wrappers::flash_attention_forward);
  wrap(t.flash_attention_masked_forward, &Wrappers::flash_attention_masked_forward);
  wrap(t.linear_forward, &Wrappers::linear_forward);
  wrap(t.mul, &Wrappers::mul);
  wrap(t.silu_forward, &Wrappers::silu_forward);
  wrap(t.swiglu_forward, &Wrappers::swiglu_forward);
  wrap(t.rmsnorm_forward, &Wrappers::rmsnorm_forward);
}

FlopsProfiler::~FlopsProfiler() { active = nullptr; }

void FlopsProfiler::enter(int layer, bool backward) {
  // A layer the runner keeps for its backward gets no after_layer call; closing it has just
  // synchronized the device, else the work enqueued before this layer (a gather) is waited for
  // here so that it is not counted as the layer's.
  if (!close() && device_) device_->synchronize();
  current_ = layer;
  backward_ = backward;
  entered_at_ = now_s();
}

void FlopsProfiler::leave() { close(); }

bool FlopsProfiler::close() {
  if (current_ < 0) return false;
  if (device_) device_->synchronize();  // the layer's kernels, not just their launches
  LayerCount& l = layers_[static_cast<size_t>(current_)];
  (backward_ ? l.bwd_s : l.fwd_s) += now_s() - entered_at_;
  if (!backward_) ++l.fwd_calls;
  current_ = -1;
  return device_ != nullptr;
}

void FlopsProfiler::reset() {
  std::fill(layers_.begin(), layers_.end(), LayerCount{});
  current_ = -1;
}

void FlopsProfiler::begin_step(Device& device) {
  device.synchronize();  // the previous step's tail is not this step's time
  reset();
  device_ = &device;
  step_started_at_ = now_s();
}

double FlopsProfiler::end_step() {
  DSCPP_CHECK(device_ != nullptr);
  device_->synchronize();
  const double step_s = now_s() - step_started_at_;
  device_ = nullptr;
  return step_s;
}

void FlopsProfiler::count(double flops) {
  // Forward only (DeepSpeed's profiler measures the forward pass); forward ops that a backward
  // recomputes are recompute_fwd_factor's business.
  if (current_ >= 0 && !backward_) layers_[static_cast<size_t>(current_)].fwd_flops += flops;
}

double FlopsProfiler::forward_flops() const {
  return std::accumulate(layers_.begin(), layers_.end(), 0.0,
                         [](double s, const LayerCount& l) { return s + l.fwd_flops; });
}

std::string FlopsProfiler::report(double step_s, int64_t samples) const {
  double fwd = 0, fwd_s = 0, bwd_s = 0;
  for (const LayerCount& l : layers_) {
    fwd += l.fwd_flops;
    fwd_s += l.fwd_s;
    bwd_s += l.bwd_s;
  }
  const int64_t params = std::accumulate(params_.begin(), params_.end(), int64_t{0});
  const double model = 3 * (1 + config_.recompute_fwd_factor) * fwd;
  auto rate = [](double flops, double s) { return s > 0 ? flops / s : 0.0; };
  std::string out = fmt::format(
      "flops profiler, step {} (rank 0; forward FLOPs counted from the ops, backward = 2x forward):\n"
      "  model params:                                     {}\n"
      "  fwd flops per rank:                               {}\n"
      "  fwd latency:                                      {:.2f} ms\n"
      "  fwd FLOPS per rank = fwd flops / fwd latency:     {}\n"
      "  bwd latency:                                      {:.2f} ms\n"
      "  bwd FLOPS per rank = 2 * fwd flops / bwd latency: {}\n"
      "  fwd+bwd FLOPS per rank:                           {}\n"
      "  step latency:                                     {:.2f} ms\n"
      "  model FLOPS per rank = {:.2g} * fwd flops / step:   {}\n"
      "  samples/second:                                   {:.2f}\n",
      config_.profile_step, si(static_cast<double>(params), ""), si(fwd, ""), fwd_s * 1e3,
      si(rate(fwd, fwd_s), "FLOPS"), bwd_s * 1e3, si(rate(2 * fwd, bwd_s), "FLOPS"),
      si(rate(3 * fwd, fwd_s + bwd_s), "FLOPS"), step_s * 1e3, 3 * (1 + config_.recompute_fwd_factor),
      si(rate(model, step_s), "FLOPS"), step_s > 0 ? static_cast<double>(samples) / step_s : 0.0);
  if (config_.module_depth == 0) return out;  // depth 0: the model as a whole
  // Layers, the top_modules heaviest first when `detailed` is off, every layer in order otherwise.
  std::vector<size_t> order(layers_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!config_.detailed) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return layers_[a].fwd_flops > layers_[b].fwd_flops; });
    order.resize(std::min(order.size(), static_cast<size_t>(std::max<int64_t>(config_.top_modules, 1))));
  }
  out += fmt::format("  {:<20} {:>10} {:>12} {:>7} {:>11} {:>14} {:>11}\n", "layer", "params", "fwd flops", "share",
                     "fwd ms", "fwd FLOPS", "bwd ms");
  for (size_t i : order) {
    const LayerCount& l = layers_[i];
    out += fmt::format("  {:<20} {:>10} {:>12} {:>6.1f}% {:>11.3f} {:>14} {:>11.3f}\n", names_[i],
                       si(static_cast<double>(params_[i]), ""), si(l.fwd_flops, ""),
                       fwd > 0 ? 100 * l.fwd_flops / fwd : 0.0, l.fwd_s * 1e3, si(rate(l.fwd_flops, l.fwd_s), "FLOPS"),
                       l.bwd_s * 1e3);
  }
  return out;
}

void FlopsProfiler::publish(double step_s, int64_t samples) const {
  const std::string text = report(step_s, samples);
  if (!config_.output_file) return log::info("{}", text);
  std::ofstream out(*config_.output_file);
  out << text;
  if (!out) fail("flops_profiler.output_file {}: cannot write it", *config_.output_file);
  log::info("flops profiler: step {} profile written to {}", config_.profile_step, *config_.output_file);
}

}  // namespace dscpp::runtime
