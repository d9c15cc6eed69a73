// fp32 GEMM for x86-64 with AVX-512: BLIS's loop nest around the packing routines and the
// 12×32 micro-kernel of gemm_avx512_kernels.h.
//
// Why not OpenBLAS for the gpt example's shapes: its sgemm re-packs both operands on every call,
// clears C for beta = 0 in a separate pass, and pays a fixed cost per call that dominates the
// small attention GEMMs. The shapes here are modest (K = 64 … 2048, M·N ≤ 2 M).
//
// Loop nest (the roles of the operands chosen for row-major C):
//   for each block of NC columns and KC depth:  pack B[KC × NC] into 32-column slivers (L2)
//     for each 12-row panel of A:               pack A[12 × KC] when A is transposed (else its
//                                               rows are read in place, or copied off a 4 KiB
//                                               stride); it stays in L1, and the next panel's
//                                               source is prefetched into L2
//       for each 32-column sliver of B:         micro-kernel: C[12 × 32] (+)= Ap · Bp, with the
//                                               beta term and bias in its epilogue
//       on the last depth block:                the activation over the panel's finished rows
#include "kernels/cpu/ops/cpu_ops_internal.h"
#include "kernels/cpu/ops/gemm_avx512_kernels.h"
#include "kernels/cpu/ops/gemm_native.h"

#include <cstring>

namespace dscpp::kernels::cpu {
namespace {

using namespace avx512;

constexpr int64_t kKc = 256;  // depth of one packed block: A panel 12 KiB (L1), B sliver 32 KiB
constexpr int64_t kNc = 512;  // columns of one packed B block: KC·NC·4 = 512 KiB (L2)
// Narrow C (N ≤ 256) with A read in place takes the whole depth, up to 1024, in one block: the
// packed B (≤ 1 MiB) still fits L2, and C is written once instead of being re-read from L3 for
// every depth block (the backward dx = dy·W shapes: ~10% faster in bench_gemm). A packed
// (transposed) A panel must stay in L1, so those keep kKc.
constexpr int64_t kKcNarrow = 1024, kNarrowN = 256;
constexpr int64_t kPackedB = std::max(kKc * kNc, kKcNarrow * kNarrowN);

// Rows of an in-place A whose stride is a multiple of 4 KiB (1024 floats: the gpt example's
// 1024-wide activations) all map to one L1 set (32 KiB / 8 ways and 48 KiB / 12 ways both repeat
// every 4 KiB), so a panel's 12 rows and the B stream evict each other on every k. The panel is
// copied to a padded stride first when more than two slivers reuse it: on Zen 4 those GEMMs went
// from 102.8 to 106.3 GFLOP/s (cold operands). The kernel's FMAs are the same, so is the result.
constexpr int64_t kAliasStride = 1024, kCopyPad = 16;
constexpr int64_t kScratchA = std::max(kMr * kKc, kMr * (kKcNarrow + kCopyPad));

// The deepest block the packing buffers hold for this shape.
int64_t max_depth_block(const GemmArgs& g) { return !g.trans_a && g.N <= kNarrowN ? kKcNarrow : kKc; }

// Thread-local, 64-byte aligned scratch for the packed operands, grown on demand and kept.
struct PackBuffers {
  float* a = nullptr;
  float* b = nullptr;
  PackBuffers() {
    a = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * (kScratchA + 16)));
    b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kPackedB));
    if (a == nullptr || b == nullptr) throw std::bad_alloc();
  }
  ~PackBuffers() {
    std::free(a);
    std::free(b);
  }
};
PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

}  // namespace

DSCPP_AVX512 void gemm_avx512_serial(const GemmArgs& g) {
  PackBuffers& buf = pack_buffers();
  const bool ta = g.trans_a, tb = g.trans_b;
  const float* src = g.c_in != nullptr ? g.c_in : g.C;
  const int64_t kc_max = std::min(g.depth_block > 0 ? g.depth_block : gemm_avx512_depth_block(g), max_depth_block(g));
  for (int64_t j0 = 0; j0 < g.N; j0 += kNc) {
    const int64_t nc = std::min(kNc, g.N - j0);
    for (int64_t k0 = 0; k0 < g.K; k0 += kc_max) {
      const int64_t kc = std::min(kc_max, g.K - k0);
      pack_b(tb, g.B, g.ldb, k0, kc, j0, nc, buf.b);
      const TileArgs t{g.alpha, g.beta, k0 == 0};
      const bool last = k0 + kc == g.K;
      const int64_t slivers = (nc + kNr - 1) / kNr;
      if (ta) pack_a_transposed(g.A, g.lda, 0, std::min(kMr, g.M), k0, kc, buf.a);
      for (int64_t i0 = 0; i0 < g.M; i0 += kMr) {
        const int64_t rows = std::min(kMr, g.M - i0), next = i0 + kMr;
        const int64_t next_rows = std::min(kMr, g.M - next);
        // Transposed A is packed (its panel is strided columns); untransposed A is read in place.
        if (ta && i0 > 0) pack_a_transposed(g.A, g.lda, i0, rows, k0, kc, buf.a);
        APanel a = ta ? packed_panel(buf.a) : rows_in_place(g.A + i0 * g.lda + k0, g.lda);
        if (!ta && g.lda % kAliasStride == 0 && slivers > 2) {
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(buf.a + r * (kc + kCopyPad), a.p + r * g.lda, sizeof(float) * kc);
          a = rows_in_place(buf.a, kc + kCopyPad);
        }
        if (g.a_row_sums != nullptr && j0 == 0) add_row_sums(a, rows, kc, g.a_row_sums + i0);
        const KernelFn kernel = kernel_for(rows, a);
        float* crow = g.C + i0 * g.ldc;
        const float* srow = src + i0 * g.ldc;
        for (int64_t s = 0; s < slivers; ++s) {
          if (next_rows > 0) {
            prefetch_a(ta, g.A, g.lda, next, next_rows, k0, kc, s, slivers);
            // The next panel's epilogue operands: the residual (first depth block) and the
            // GELU's input (last).
            if (k0 == 0 && g.c_in != nullptr && g.beta != 0.0f)
              prefetch_rows(g.c_in + next * g.ldc + j0, g.ldc, next_rows, nc, s, slivers);
            if (last && g.act_in != nullptr)
              prefetch_rows(g.act_in + next * g.ldc + j0, g.ldc, next_rows, nc, s, slivers);
          }
          const int64_t jb = j0 + s * kNr;
          const int64_t cols = std::min(kNr, nc - s * kNr);
          const float* bias = last && g.bias != nullptr ? g.bias + jb : nullptr;
          // The tile's C lines into L1 now, so their misses resolve while the kernel runs rather
          // than stalling its epilogue (C mostly arrives from DRAM): +1.5% over the gpt shapes
          // with cold operands on Zen 4, where the k loop itself runs at the FMA peak.
          for (int64_t r = 0; r < rows; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(crow + r * g.ldc + jb), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(crow + r * g.ldc + jb + 16), _MM_HINT_T0);
          }
          kernel(kc, a, buf.b + s * kc * kNr, crow + jb, g.ldc, low_mask(cols), low_mask(cols - 16), t, bias,
                 srow + jb);
        }
        // The panel's rows of this column block are final: apply the activation while they
        // are still in L1/L2 instead of in a separate pass over C.
        if (last && g.act != GemmArgs::Act::none)
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t off = (i0 + r) * g.ldc + j0;
            if (g.act == GemmArgs::Act::gelu) gelu_rows(g.C + off, g.act_out + off, nc);
            else gelu_backward_rows(g.act_in + off, g.C + off, g.C + off, nc);
          }
      }
    }
  }
}

int64_t gemm_avx512_depth_block(const GemmArgs& g) { return std::min(max_depth_block(g), g.K); }

namespace {

// (_mm512_reduce_add_ps's pass-through operand: see gemm_avx512_kernels.h.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// M (≤ 8) rows of A against two rows of B at a time: 2·M sums of 16 lanes each, independent, so
// the FMAs overlap, and every B vector loaded serves M rows (B streams from memory once).
template <int M>
DSCPP_AVX512 void skinny_dots(const GemmArgs& g, int64_t j0, int64_t j1, float* acc, int64_t w) {
  const int64_t K = g.K, body = K & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - body)) - 1u);
  for (int64_t j = j0; j < j1; j += 2) {
    const bool two = j + 1 < j1;
    const float* b0 = g.B + j * g.ldb;
    const float* b1 = two ? b0 + g.ldb : b0;
    __m512 s0[M], s1[M];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) s0[i] = s1[i] = _mm512_setzero_ps();
    // Ask for the rows four pairs on: the hardware prefetcher alone left the LM head's shape
    // (32128 × 512, M = 8, two threads) at 9.6 GB/s; 12.4 with this.
    const float* ahead = g.B + std::min(j + 8, j1 - 1) * g.ldb;
    for (int64_t k = 0; k < body; k += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ahead + g.ldb + k), _MM_HINT_T0);
      const __m512 x0 = _mm512_loadu_ps(b0 + k), x1 = _mm512_loadu_ps(b1 + k);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        const __m512 a = _mm512_loadu_ps(g.A + i * g.lda + k);
        s0[i] = _mm512_fmadd_ps(a, x0, s0[i]);
        s1[i] = _mm512_fmadd_ps(a, x1, s1[i]);
      }
    }
    if (tail != 0) {
      const __m512 x0 = _mm512_maskz_loadu_ps(tail, b0 + body), x1 = _mm512_maskz_loadu_ps(tail, b1 + body);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        const __m512 a = _mm512_maskz_loadu_ps(tail, g.A + i * g.lda + body);
        s0[i] = _mm512_fmadd_ps(a, x0, s0[i]);
        s1[i] = _mm512_fmadd_ps(a, x1, s1[i]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      acc[i * w + j - j0] = _mm512_reduce_add_ps(s0[i]);
      if (two) acc[i * w + j + 1 - j0] = _mm512_reduce_add_ps(s1[i]);
    }
  }
}

#pragma GCC diagnostic pop

}  // namespace

void gemm_avx512_skinny_dots(const GemmArgs& g, int64_t j0, int64_t j1, float* acc, int64_t w) {
  using Dots = void (*)(const GemmArgs&, int64_t, int64_t, float*, int64_t);
  static constexpr Dots kByRows[] = {skinny_dots<1>, skinny_dots<2>, skinny_dots<3>, skinny_dots<4>,
                                     skinny_dots<5>, skinny_dots<6>, skinny_dots<7>, skinny_dots<8>};
  kByRows[g.M - 1](g, j0, j1, acc, w);  // 1 ≤ M ≤ 8: the caller's skinny()
}

bool gemm_avx512_available() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  return available;
}

}  // namespace dscpp::kernels::cpu
