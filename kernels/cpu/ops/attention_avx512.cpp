// Fused causal attention for one (sequence, head) pair on the AVX-512 GEMM building blocks.
//
// Why fused: per head the products are T×T×D with T = 128, D = 64 in the gpt example, so six
// GEMM calls per pair each paid packing and call overhead for ~2 MFLOP of work (~45 GFLOP/s in
// the training loop), and computed the masked upper triangle. Here each operand is packed once
// per pair (row-major A operands are read in place) and every 12-row panel only visits the
// columns (or depth) the causal mask keeps:
//   forward   S = scale·Q·Kᵀ on columns s < t0 + 12 → causal softmax in place → O = P·V with
//             depth s < t0 + 12
//   backward  dP = dO·Vᵀ (same columns) → dS = scale·P·(dP − Σ dP·P) → dQ = dS·K; then
//             dK = dSᵀ·Q and dV = Pᵀ·dO with depth t ≥ s0 (dS and P are 0 above the diagonal)
#include "kernels/cpu/ops/attention_native.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/cpu/ops/gemm_avx512_kernels.h"

#include <algorithm>

namespace dscpp::kernels::cpu {
namespace {

using namespace avx512;

struct Scratch {
  AlignedScratch b0, b1, a;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

int64_t slivers(int64_t n) { return (n + kNr - 1) / kNr; }

// C[rows × n] (stride ldc) = alpha·A·B for an A operand of depth kc and the packed B slivers of
// a block whose depth stride is kc_b (row k0 of each sliver is where this product starts).
DSCPP_AVX512 void panel_product(int64_t rows, int64_t kc, APanel a, const float* bp, int64_t kc_b, int64_t k0,
                                int64_t n, float alpha, float* c, int64_t ldc) {
  const TileArgs t{alpha, 0.0f, true};
  const KernelFn kernel = kernel_for(rows, a);
  for (int64_t s = 0; s < slivers(n); ++s) {
    const int64_t cols = std::min(kNr, n - s * kNr);
    kernel(kc, a, bp + s * kc_b * kNr + k0 * kNr, c + s * kNr, ldc, low_mask(cols), low_mask(cols - 16), t, nullptr,
           nullptr);
  }
}
// Rows t0 … of a row-major matrix, read in place as the A operand.
APanel rows_of(const float* m, int64_t ld, int64_t t0) { return rows_in_place(m + t0 * ld, ld); }

// Part `part` of `parts` of the rows of the next pair's matrices, into L2.
void prefetch_next(const AttentionNext& next, int64_t T, int64_t part, int64_t parts) {
  for (int m = 0; m < next.count; ++m) prefetch_rows(next.base[m], next.ld[m], T, next.width[m], part, parts);
}

}  // namespace

DSCPP_AVX512 void attention_forward_avx512(const AttentionPair& a, float* probs, float* out, int64_t ld_out,
                                           float* lse, const AttentionNext& next) {
  const int64_t T = a.T, D = a.D;
  Scratch& sc = scratch();
  float* kt = sc.b0.get(slivers(T) * kNr * D);  // Kᵀ: depth D, T columns
  float* vp = sc.b1.get(slivers(D) * kNr * T);  // V: depth T, D columns
  pack_b(true, a.k, a.ld, 0, D, 0, T, kt);
  if (out != nullptr) pack_b(false, a.v, a.ld, 0, T, 0, D, vp);
  const int64_t panels = (T + kMr - 1) / kMr;
  for (int64_t t0 = 0; t0 < T; t0 += kMr) {
    const int64_t rows = std::min(kMr, T - t0), live = t0 + rows;  // columns s < live can be unmasked
    prefetch_next(next, T, t0 / kMr, panels);
    float* p = probs + t0 * T;
    panel_product(rows, D, rows_of(a.q, a.ld, t0), kt, D, 0, live, a.scale, p, T);
    for (int64_t r = 0; r < rows; ++r) {
      const float l = probability_row(a, p + r * T, t0 + r);
      if (lse != nullptr) lse[t0 + r] = l;
    }
    if (out != nullptr) panel_product(rows, live, rows_of(probs, T, t0), vp, T, 0, D, 1.0f, out + t0 * ld_out, ld_out);
  }
}

DSCPP_AVX512 void attention_backward_avx512(const AttentionPair& a, const float* probs, const float* dout,
                                            int64_t ld_out, float* dq, float* dk, float* dv, float* dscores,
                                            const AttentionNext& next) {
  const int64_t T = a.T, D = a.D;
  Scratch& sc = scratch();
  float* b0 = sc.b0.get(slivers(std::max(T, D)) * kNr * std::max(T, D));
  float* b1 = sc.b1.get(slivers(D) * kNr * T);
  float* ap = sc.a.get(kMr * std::max(T, D));
  // dP = dO·Vᵀ → dS (rows of dscores), then dQ = dS·K.
  pack_b(true, a.v, a.ld, 0, D, 0, T, b0);   // Vᵀ: depth D, T columns
  pack_b(false, a.k, a.ld, 0, T, 0, D, b1);  // K: depth T, D columns
  const int64_t panels = (T + kMr - 1) / kMr;
  for (int64_t t0 = 0; t0 < T; t0 += kMr) {
    const int64_t rows = std::min(kMr, T - t0), live = t0 + rows;
    prefetch_next(next, T, t0 / kMr, panels);
    float* ds = dscores + t0 * T;
    panel_product(rows, D, rows_of(dout, ld_out, t0), b0, D, 0, live, 1.0f, ds, T);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = t0 + r + 1;
      softmax_row_backward(probs + (t0 + r) * T, ds + r * T, a.scale, ds + r * T, n);
      std::fill(ds + r * T + n, ds + (r + 1) * T, 0.0f);
    }
    panel_product(rows, live, rows_of(dscores, T, t0), b1, T, 0, D, 1.0f, dq + t0 * a.ld, a.ld);
  }
  // dK = dSᵀ·Q and dV = Pᵀ·dO: key rows s0 … see queries t ≥ s0 only.
  pack_b(false, a.q, a.ld, 0, T, 0, D, b0);     // Q: depth T, D columns
  pack_b(false, dout, ld_out, 0, T, 0, D, b1);  // dO: depth T, D columns
  for (int64_t s0 = 0; s0 < T; s0 += kMr) {
    const int64_t rows = std::min(kMr, T - s0), depth = T - s0;
    pack_a_transposed(dscores, T, s0, rows, s0, depth, ap);
    panel_product(rows, depth, packed_panel(ap), b0, T, s0, D, 1.0f, dk + s0 * a.ld, a.ld);
    pack_a_transposed(probs, T, s0, rows, s0, depth, ap);
    panel_product(rows, depth, packed_panel(ap), b1, T, s0, D, 1.0f, dv + s0 * a.ld, a.ld);
  }
}

}  // namespace dscpp::kernels::cpu
