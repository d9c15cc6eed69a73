// The Linear part (dscpp/layers.h): y = x·Wᵀ + b through the table's fused linear entries, its
// strided form for packed q/k/v rows, null gradients of frozen weights, and PEFT's LoRA adapter
// with its lora_dropout.
#include "dscpp/layers.h"

#include <cmath>

namespace dscpp::layers {
namespace {

// PEFT's module name: the weight's full name without ".weight".
std::string module_of(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() > suffix.size() && weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight.substr(0, weight.size() - suffix.size());
  return weight;
}

// The adapter's local name beside the weight's: "self_attn.q_proj.weight" → "self_attn.q_proj.lora_A.weight".
std::string beside(const std::string& local, const char* part) {
  const std::string stem = local == "weight" ? "" : module_of(local) + ".";
  return stem + part + ".weight";
}

// FNV-1a of a module's full name: what tells apart the dropout masks of the adapted Linears that
// share one layer's rng_seed.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

}  // namespace

Linear::Linear(Layer& owner, const Name& w, int64_t in_, int64_t out_, Init init, const Name& b, bool file_transposed,
               const std::string& tied_to, int64_t rows)
    : in(in_), out(out_) {
  weight = owner.add_param({w, {out, in}, init, tied_to, file_transposed, DSCPP_ROLE_WEIGHT});
  if (!b.empty()) bias = owner.add_param({b, {out}, zeros(), "", false, DSCPP_ROLE_BIAS});
  Lora* lora = owner.env().lora;
  const std::string module = module_of(owner.full_name(weight));
  if (lora == nullptr || !lora->linear(module, !tied_to.empty(), file_transposed)) return;
  rank_ = lora->spec().r;
  scale_ = lora->spec().scale();
  // PEFT's init: A as nn.Linear's default (Kaiming-uniform with a = √5: U(−1/√in, 1/√in)), B zeros,
  // so the adapted model starts as the base model. The matrices are [r, in] and [out, r] in
  // PEFT's files whatever layout the base weight's file has (Conv1D's fan_in_fan_out included).
  const Init a_init{DSCPP_INIT_UNIFORM, static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)))};
  auto adapter = [&](const char* part, std::vector<int64_t> shape, Init start) {
    ParamSpec p;
    p.name = Name(beside(w.local, part), module + "." + part + ".weight");
    p.shape = std::move(shape);
    p.init = start;
    p.adapter = true;
    return owner.add_param(std::move(p));
  };
  lora_a = adapter("lora_A", {rank_, in}, a_init);
  lora_b = adapter("lora_B", {out, rank_}, zeros());
  // x·Aᵀ is kept from forward for B's gradient rather than made again in backward: it is r values
  // a row (r/out of the output's size), where recomputing it would cost a rows×in×r GEMM per call.
  const int64_t e = static_cast<int64_t>(owner.env().elem);
  const int64_t per_sample = rows > 0 ? rows : owner.env().context;
  sv_ax_ = owner.saved.add(per_sample * rank_ * e);
  bw_dyb_ = owner.bwd_work.add(per_sample * rank_ * e);
  dw_ax_ = owner.decode_work.add((rows > 0 ? rows : 1) * rank_ * e);
  dropout_ = static_cast<float>(lora->spec().dropout);
  if (dropout_ == 0) return;
  // drop(x) is made again in backward rather than saved: an elementwise pass over x, where keeping
  // it would add in·rows elements a sample to the saved activations of every adapted Linear (the
  // mask itself is a function of the seed and costs nothing to keep). The scratch it goes in is the
  // layer's shared slot, which every adapted Linear of the layer uses in turn.
  dropout_salt_ = name_hash(module);
  fw_drop_ = owner.fwd_work.add_shared(per_sample * in * e);
  bw_drop_ = owner.bwd_work.add_shared(per_sample * in * e);
}

std::optional<uint64_t> Linear::dropout_seed(const Call& c) const {
  if (dropout_ == 0 || c.decode != nullptr || c.ctx.training == 0) return std::nullopt;
  // rng_seed is the same in a layer's forward, its backward and a checkpointed recompute, so the
  // three draw one mask; the salt makes it this module's.
  return c.ctx.rng_seed ^ dropout_salt_;
}

void Linear::forward(const Call& c, const void* x, void* y, int64_t rows, const void* residual, void* gelu_out) const {
  // An adapter's term joins y before the GELU, so the GELU is then a pass of its own.
  DSCPP_CALL(c.ops(), linear_forward, x, c.param(weight), bias >= 0 ? c.param(bias) : nullptr, residual, y,
             adapted() ? nullptr : gelu_out, rows, in, out);
  if (!adapted()) return;
  lora_forward(c, x, y, out, rows);
  if (gelu_out != nullptr) DSCPP_CALL(c.ops(), gelu_forward, y, gelu_out, rows * out);
}

void Linear::forward_strided(const Call& c, const void* x, void* y, int64_t ld, int64_t rows, const void* ones) const {
  if (ld == out) return forward(c, x, y, rows);
  DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_TRANS, rows, out, in, 1.0f, x, in, c.param(weight), in, 0.0f, y, ld);
  // The bias as a rank-1 product: y += ones[rows × 1]·b[1 × out].
  if (bias >= 0)
    DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, out, int64_t{1}, 1.0f, ones, int64_t{1},
               c.param(bias), out, 1.0f, y, ld);
  if (adapted()) lora_forward(c, x, y, ld, rows);
}

void Linear::backward(const Call& c, const void* dy, int64_t ld, const void* x, void* dx, bool accumulate, int64_t rows,
                      const void* ones, const void* gelu_pre) const {
  if (gelu_pre != nullptr && accumulate)
    fail(DSCPP_E_INTERNAL, "layer " + c.layer.name() + ": a linear's gradient through a GELU cannot accumulate");
  void* dw = c.grad(weight);
  void* db = bias >= 0 ? c.grad(bias) : nullptr;
  // The table's fused backward needs a weight gradient and has no adapter term.
  if (ld == out && !accumulate && dw != nullptr && !adapted()) {
    DSCPP_CALL(c.ops(), linear_backward, dy, x, c.param(weight), dw, db, dx, gelu_pre, rows, in, out);
    return;
  }
  if (dw != nullptr)
    DSCPP_CALL(c.ops(), gemm, DSCPP_TRANS, DSCPP_NO_TRANS, out, in, rows, 1.0f, dy, ld, x, in, 1.0f, dw, in);
  if (db != nullptr) {
    if (ld == out)
      DSCPP_CALL(c.ops(), bias_grad, dy, db, rows, out);
    else
      DSCPP_CALL(c.ops(), gemm, DSCPP_TRANS, DSCPP_NO_TRANS, int64_t{1}, out, rows, 1.0f, ones, int64_t{1}, dy, ld,
                 1.0f, db, out);
  }
  if (dx != nullptr)
    DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, in, out, 1.0f, dy, ld, c.param(weight), in,
               accumulate ? 1.0f : 0.0f, dx, in);
  if (adapted()) lora_backward(c, dy, ld, x, dx, rows);
  if (dx != nullptr && gelu_pre != nullptr) DSCPP_CALL(c.ops(), gelu_backward, gelu_pre, dx, dx, rows * in);
}

// y (row stride ld) += scale·(drop(x)·Aᵀ)·Bᵀ, drop(x)·Aᵀ kept in the layer's saved buffer
// (decoding: scratch).
void Linear::lora_forward(const Call& c, const void* x, void* y, int64_t ld, int64_t rows) const {
  void* ax = c.decode != nullptr ? c.decode->work(dw_ax_) : c.saved(sv_ax_);
  if (const std::optional<uint64_t> seed = dropout_seed(c)) {
    void* xd = c.fwd_work(fw_drop_);
    DSCPP_CALL(c.ops(), dropout, x, xd, rows * in, dropout_, *seed);
    x = xd;
  }
  DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_TRANS, rows, rank_, in, 1.0f, x, in, c.param(lora_a), in, 0.0f, ax,
             rank_);
  DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_TRANS, rows, out, rank_, scale_, ax, rank_, c.param(lora_b), rank_,
             1.0f, y, ld);
}

// With g = dy·B [rows × r]: dB += scale·dyᵀ·(drop(x)·Aᵀ), dA += scale·gᵀ·drop(x), and
// dx += drop'(scale·g·A), drop' being the same mask and scale (drop is linear in x).
void Linear::lora_backward(const Call& c, const void* dy, int64_t ld, const void* x, void* dx, int64_t rows) const {
  void* da = c.grad(lora_a);
  void* db = c.grad(lora_b);
  if (db != nullptr)
    DSCPP_CALL(c.ops(), gemm, DSCPP_TRANS, DSCPP_NO_TRANS, out, rank_, rows, scale_, dy, ld, c.saved(sv_ax_), rank_,
               1.0f, db, rank_);
  if (da == nullptr && dx == nullptr) return;
  void* g = c.bwd_work(bw_dyb_);
  DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, rank_, out, 1.0f, dy, ld, c.param(lora_b), rank_,
             0.0f, g, rank_);
  const std::optional<uint64_t> seed = dropout_seed(c);
  void* scratch = seed ? c.bwd_work(bw_drop_) : nullptr;  // drop(x) for dA, then the dx term
  if (da != nullptr) {
    if (seed) {
      DSCPP_CALL(c.ops(), dropout, x, scratch, rows * in, dropout_, *seed);
      x = scratch;
    }
    DSCPP_CALL(c.ops(), gemm, DSCPP_TRANS, DSCPP_NO_TRANS, rank_, in, rows, scale_, g, rank_, x, in, 1.0f, da, in);
  }
  if (dx == nullptr) return;
  if (!seed) {
    DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, in, rank_, scale_, g, rank_, c.param(lora_a), in,
               1.0f, dx, in);
    return;
  }
  DSCPP_CALL(c.ops(), gemm, DSCPP_NO_TRANS, DSCPP_NO_TRANS, rows, in, rank_, scale_, g, rank_, c.param(lora_a), in,
             0.0f, scratch, in);
  DSCPP_CALL(c.ops(), dropout, scratch, scratch, rows * in, dropout_, *seed);
  DSCPP_CALL(c.ops(), add, dx, scratch, dx, rows * in);
}

}  // namespace dscpp::layers
