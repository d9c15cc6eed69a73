// The AVX-512 building blocks of dscpp's fp32 GEMM (private to kernels/cpu/ops): operand
// packing and the 12×32 register-tiled micro-kernel. Included by the TUs that drive them
// (gemm_avx512.cpp, attention_avx512.cpp); every function is compiled for AVX-512 F/VL/DQ/BW
// and must only run after gemm_avx512_available() said yes.
//
// Packed layouts:
//  - A panel: 12 rows × kc depth, k-major (Ap[k·12 + i]), so the kernel broadcasts A[i, k];
//    untransposed A needs no packing (APanel reads its rows in place).
//  - B sliver: kc depth × 32 columns, k-major (Bp[k·32 + j]), zero-padded past the last column;
//    a packed block of nc columns is ceil(nc/32) slivers, sliver s at s·kc·32.
// The micro-kernel keeps a 12×32 tile of C in 24 zmm accumulators; per k it loads two vectors
// of B and broadcasts 12 values of A (24 FMAs per 14 loads, so the FMA ports are the limit), two
// k per loop trip, specialised per A layout. Kernel alone on the Xeon we develop on (B streaming
// from L2, best of 40): ~130 GFLOP/s with one k per trip and a run-time A layout, ~140–150 now,
// against an FMA peak of 153–165 (the clock varies with the other core's load); on a Zen 4 EPYC
// (512-bit ops on 256-bit units) 113–116 against a peak of 116–117. A 14×32 tile
// measured faster still with a packed A; with A in place (in assembly, 5 row bases) it was only
// 1–2% faster than 12×32, not worth a second tile shape.
#pragma once

#include "kernels/cpu/ops/gemm_native.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#define DSCPP_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,fma")))

namespace dscpp::kernels::cpu::avx512 {

// GCC 12 flags the _mm512_undefined_ps() pass-through operand inside several intrinsics
// (unpack, shuffle, extract) as maybe-uninitialized; the value is never used (full masks).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"


inline constexpr int64_t kMr = kGemmTileRows;  // rows of a C tile (A values broadcast per k)
inline constexpr int64_t kNr = kGemmTileCols;  // columns of a C tile (two zmm vectors)

// The A operand of a micro-kernel call: value (i, k) at p[i·row_stride + k·k_stride]. A packed
// panel is (1, 12); rows of an untransposed A are read in place as (lda, 1), which spares the
// transposing copy (the 12 rows of a panel are the same 12·kc floats either way, and GCC keeps a
// register offset per row so each broadcast is still one load).
// 16 bytes, so it travels in two registers (a 24-byte struct goes through the stack, and the
// callee's 16-byte reload of it stalled on store forwarding once per call).
struct APanel {
  const float* p;
  int32_t row_stride, k_stride;  // the ops' argument checks keep strides within blasint (int32)
};
inline APanel packed_panel(const float* ap) { return APanel{ap, 1, static_cast<int32_t>(kMr)}; }
inline APanel rows_in_place(const float* a, int64_t ld) { return APanel{a, static_cast<int32_t>(ld), 1}; }


// In-register transpose of a 16×16 block: r[i] holds row i on entry and column i on exit.
DSCPP_AVX512 __attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4q + m] now holds, in 128-bit lane L, elements (4q … 4q+3 of) column 4L + m of rows 4q…4q+3.
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

inline __mmask16 low_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// Packs the panel rows [i0, i0 + rows) × depth [k0, k0 + kc) of op(A) = Aᵀ (A stored [K, M]):
// Ap[k·12 + i] = A[k0 + k, i0 + i], each row k of A holding the panel's values contiguously.
// Entries for i ≥ rows are unspecified: the kernel for `rows` rows never reads them.
DSCPP_AVX512 inline void pack_a_transposed(const float* A, int64_t lda, int64_t i0, int64_t rows, int64_t k0,
                                           int64_t kc, float* ap) {
  const __mmask16 m = low_mask(rows);
  const float* src = A + k0 * lda + i0;
  for (int64_t k = 0; k < kc; ++k) _mm512_mask_storeu_ps(ap + k * kMr, m, _mm512_maskz_loadu_ps(m, src + k * lda));
}

// sums[i] += Σ_k Ap[k·12 + i] for i < rows: the row sums of a packed panel, read back from L1.
DSCPP_AVX512 inline void add_panel_row_sums(const float* ap, int64_t rows, int64_t kc, float* sums) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) acc = _mm512_add_ps(acc, _mm512_loadu_ps(ap + k * kMr));
  const __mmask16 m = low_mask(rows);
  _mm512_mask_storeu_ps(sums, m, _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, sums)));
}

// sums[i] += Σ_k a(i, k) for i < rows over depth kc, for either layout of APanel.
DSCPP_AVX512 inline void add_row_sums(APanel a, int64_t rows, int64_t kc, float* sums) {
  if (a.row_stride == 1 && a.k_stride == kMr) return add_panel_row_sums(a.p, rows, kc, sums);
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = a.p + i * int64_t{a.row_stride};
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    if (a.k_stride == 1)
      for (; k + 16 <= kc; k += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(r + k));
    float s = _mm512_reduce_add_ps(acc);
    for (; k < kc; ++k) s += r[k * int64_t{a.k_stride}];
    sums[i] += s;
  }
}

// Part `part` of `parts` of `nrows` rows (stride ld) of `len` floats each, fetched into L2.
// Callers spread the parts over the kernel calls of the current panel so the next panel's
// operands are there when it starts: activations arrive cold from DRAM, and a packing pass or
// epilogue that waits for them stalls the FMA ports.
inline void prefetch_rows(const float* base, int64_t ld, int64_t nrows, int64_t len, int64_t part, int64_t parts) {
  for (int64_t r = nrows * part / parts, e = nrows * (part + 1) / parts; r < e; ++r) {
    const char* p = reinterpret_cast<const char*>(base + r * ld);
    const char* end = reinterpret_cast<const char*>(base + r * ld + len);
    for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T1);
    _mm_prefetch(end - 1, _MM_HINT_T1);
  }
}

// The part of a panel's A operand: rows of A untransposed (kc floats each, read in place by the
// kernel), rows k (`rows` floats each) transposed (read by pack_a_transposed).
inline void prefetch_a(bool trans, const float* A, int64_t lda, int64_t i0, int64_t rows, int64_t k0, int64_t kc,
                       int64_t part, int64_t parts) {
  if (trans) prefetch_rows(A + k0 * lda + i0, lda, kc, rows, part, parts);
  else prefetch_rows(A + i0 * lda + k0, lda, rows, kc, part, parts);
}

// Bp holds ceil(nc/32) slivers; sliver s is kc × 32 (row k at s·kc·32 + k·32), zero-padded past nc.
DSCPP_AVX512 inline void pack_b(bool trans, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                                float* bp) {
  const int64_t slivers = (nc + kNr - 1) / kNr;
  if (!trans) {
    // op(B)(k, j) = B[k, j]: each row k of the block is read once, front to back (so the
    // hardware prefetcher streams it), and dealt out to the slivers.
    const int64_t full = nc / kNr, rest = nc - full * kNr;
    const __mmask16 m0 = low_mask(rest), m1 = low_mask(rest - 16);
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (k0 + k) * ldb + j0;
      float* dst = bp + k * kNr;
      for (int64_t s = 0; s < full; ++s) {
        _mm512_store_ps(dst + s * kc * kNr, _mm512_loadu_ps(src + s * kNr));
        _mm512_store_ps(dst + s * kc * kNr + 16, _mm512_loadu_ps(src + s * kNr + 16));
      }
      if (rest > 0) {
        _mm512_store_ps(dst + full * kc * kNr, _mm512_maskz_loadu_ps(m0, src + full * kNr));
        _mm512_store_ps(dst + full * kc * kNr + 16, _mm512_maskz_loadu_ps(m1, src + full * kNr + 16));
      }
    }
    return;
  }
  // op(B)(k, j) = B[j, k]: column j of sliver s is row j0 + 32s + j of B; transpose 16×16 blocks.
  for (int64_t s = 0; s < slivers; ++s) {
    const int64_t cols = std::min(kNr, nc - s * kNr);
    float* dst = bp + s * kc * kNr;
    const int64_t jb = j0 + s * kNr;
    for (int64_t half = 0; half < 2; ++half) {
      const float* row[16];  // columns past `cols` load nothing (mask 0) from a valid address
      for (int j = 0; j < 16; ++j) row[j] = B + (jb + std::min<int64_t>(half * 16 + j, cols - 1)) * ldb + k0;
      for (int64_t k = 0; k < kc; k += 16) {
        const __mmask16 mk = low_mask(kc - k);
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) r[j] = _mm512_maskz_loadu_ps(half * 16 + j < cols ? mk : 0, row[j] + k);
        transpose16(r);
        if (kc - k >= 16) {
#pragma GCC unroll 16
          for (int kk = 0; kk < 16; ++kk) _mm512_store_ps(dst + (k + kk) * kNr + half * 16, r[kk]);
        } else {
          for (int64_t kk = 0; kk < kc - k; ++kk) _mm512_store_ps(dst + (k + kk) * kNr + half * 16, r[kk]);
        }
      }
    }
  }
}

struct TileArgs {
  float alpha, beta;  // C = alpha·acc + beta·S on the first depth block, C += alpha·acc after
  bool first;         // first depth block: the beta term applies (beta = 0 never reads S)
};

// One k of the micro-kernel: the tile's rows times B's row k (two vectors); inlined, so the
// accumulator arrays stay in registers.
template <int R>
DSCPP_AVX512 __attribute__((always_inline)) inline void kernel_step(const float* const* row, int64_t off,
                                                                    const float* b, __m512* acc0, __m512* acc1) {
  const __m512 b0 = _mm512_load_ps(b);
  const __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    const __m512 ai = _mm512_set1_ps(row[i][off]);
    acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
    acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
  }
}

// The k loop of a full tile (12 rows) with A read in place, in assembly. For the intrinsic loop GCC
// 12 keeps 12 row pointers, the k offset, B and the bound, reloads two of them from the stack every
// two k, and rotates accumulators through spare zmm registers with 5 moves per two k. Here the 12
// rows are addressed from 4 bases and the row stride (row 3q + m at base_q + m·ld, m < 3) and every
// accumulator keeps its register: zmm0–11 hold columns 0–15 of rows 0–11, zmm12–23 columns 16–31.
// The FMAs are the intrinsic loop's, in the same order, so results are bit-identical (checked with
// memcmp on every gpt GEMM shape). Measured against it: 4–5% faster with A rows and B slivers
// streaming from L2; whole GEMMs with cold operands (the seven gpt shapes that read A in place, 3
// runs): 0–8%, mean +4.5%. The tile goes out through `acc` (24 × 16 floats) to the shared epilogue.
#define DSCPP_GEMM_ROW(ADDR, I, J, T)                                                           \
  "vbroadcastss " ADDR ", %%zmm" #T "\n\t"                                                     \
  "vfmadd231ps %%zmm28, %%zmm" #T ", %%zmm" #I "\n\t"                                          \
  "vfmadd231ps %%zmm29, %%zmm" #T ", %%zmm" #J "\n\t"
#define DSCPP_GEMM_K(K)                                                                          \
  "vmovaps " #K "*128(%[b]), %%zmm28\n\t"                                                      \
  "vmovaps " #K "*128+64(%[b]), %%zmm29\n\t"                                                   \
  DSCPP_GEMM_ROW(#K "*4(%[r0])", 0, 12, 30) DSCPP_GEMM_ROW(#K "*4(%[r0],%[ld],1)", 1, 13, 31)  \
  DSCPP_GEMM_ROW(#K "*4(%[r0],%[ld],2)", 2, 14, 30) DSCPP_GEMM_ROW(#K "*4(%[r3])", 3, 15, 31)  \
  DSCPP_GEMM_ROW(#K "*4(%[r3],%[ld],1)", 4, 16, 30) DSCPP_GEMM_ROW(#K "*4(%[r3],%[ld],2)", 5, 17, 31) \
  DSCPP_GEMM_ROW(#K "*4(%[r6])", 6, 18, 30) DSCPP_GEMM_ROW(#K "*4(%[r6],%[ld],1)", 7, 19, 31)  \
  DSCPP_GEMM_ROW(#K "*4(%[r6],%[ld],2)", 8, 20, 30) DSCPP_GEMM_ROW(#K "*4(%[r9])", 9, 21, 31)  \
  DSCPP_GEMM_ROW(#K "*4(%[r9],%[ld],1)", 10, 22, 30) DSCPP_GEMM_ROW(#K "*4(%[r9],%[ld],2)", 11, 23, 31)
#define DSCPP_GEMM_ZERO(I) "vpxord %%zmm" #I ", %%zmm" #I ", %%zmm" #I "\n\t"
#define DSCPP_GEMM_SAVE(I) "vmovaps %%zmm" #I ", " #I "*64(%[acc])\n\t"
#define DSCPP_GEMM_EACH6(M, A, B, C, D, E, F) M(A) M(B) M(C) M(D) M(E) M(F)
#define DSCPP_GEMM_EACH24(M)                                                                     \
  DSCPP_GEMM_EACH6(M, 0, 1, 2, 3, 4, 5) DSCPP_GEMM_EACH6(M, 6, 7, 8, 9, 10, 11)               \
  DSCPP_GEMM_EACH6(M, 12, 13, 14, 15, 16, 17) DSCPP_GEMM_EACH6(M, 18, 19, 20, 21, 22, 23)

DSCPP_AVX512 inline void in_place_tile_loop(int64_t kc, const float* a, int64_t lda, const float* b, float* acc) {
  const float* r0 = a;
  const float* r3 = a + 3 * lda;
  const float* r6 = a + 6 * lda;
  const float* r9 = a + 9 * lda;
  const int64_t ld = lda * static_cast<int64_t>(sizeof(float));
  int64_t quads = kc / 4, rest = kc % 4;
  asm volatile(
      DSCPP_GEMM_EACH24(DSCPP_GEMM_ZERO)
      "test %[quads], %[quads]\n\t"
      "jz 2f\n\t"
      ".p2align 5\n"
      "1:\n\t"  // four k per trip
      DSCPP_GEMM_K(0) DSCPP_GEMM_K(1) DSCPP_GEMM_K(2) DSCPP_GEMM_K(3)
      "add $16, %[r0]\n\tadd $16, %[r3]\n\tadd $16, %[r6]\n\tadd $16, %[r9]\n\t"
      "add $512, %[b]\n\t"
      "dec %[quads]\n\t"
      "jnz 1b\n"
      "2:\n\t"
      "test %[rest], %[rest]\n\t"
      "jz 4f\n"
      "3:\n\t"  // the last kc % 4
      DSCPP_GEMM_K(0)
      "add $4, %[r0]\n\tadd $4, %[r3]\n\tadd $4, %[r6]\n\tadd $4, %[r9]\n\t"
      "add $128, %[b]\n\t"
      "dec %[rest]\n\t"
      "jnz 3b\n"
      "4:\n\t"
      DSCPP_GEMM_EACH24(DSCPP_GEMM_SAVE)
      : [r0] "+r"(r0), [r3] "+r"(r3), [r6] "+r"(r6), [r9] "+r"(r9), [b] "+r"(b), [quads] "+r"(quads),
        [rest] "+r"(rest)
      : [ld] "r"(ld), [acc] "r"(acc)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
        "xmm23", "xmm28", "xmm29", "xmm30", "xmm31");
}
#undef DSCPP_GEMM_ROW
#undef DSCPP_GEMM_K
#undef DSCPP_GEMM_ZERO
#undef DSCPP_GEMM_SAVE
#undef DSCPP_GEMM_EACH6
#undef DSCPP_GEMM_EACH24

// C tile (+)= alpha·A·Bp over depth kc; on the first depth block the beta term reads `src`
// (C itself or another matrix with C's row stride), and `bias` (null: none) is added per column.
// Packed says which APanel layout at compile time, so the k step and row offsets are constants
// or registers rather than multiplications (GCC then keeps every row offset in a register).
template <int R, bool Packed>
DSCPP_AVX512 void micro_kernel(int64_t kc, APanel a, const float* __restrict bp, float* c, int64_t ldc, __mmask16 m0,
                               __mmask16 m1, const TileArgs& t, const float* bias, const float* src) {
  __m512 acc0[R], acc1[R];
  if constexpr (R == kMr && !Packed) {
    alignas(64) float tile[2 * kMr * 16];
    in_place_tile_loop(kc, a.p, a.row_stride, bp, tile);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_load_ps(tile + 16 * i);
      acc1[i] = _mm512_load_ps(tile + 16 * (kMr + i));
    }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
    const float* row[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) row[i] = a.p + (Packed ? i : int64_t{i} * a.row_stride);
    constexpr int64_t ks = Packed ? kMr : 1;
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {  // two k per trip: half the loop overhead between FMA groups
      kernel_step<R>(row, k * ks, bp + k * kNr, acc0, acc1);
      kernel_step<R>(row, (k + 1) * ks, bp + (k + 1) * kNr, acc0, acc1);
    }
    if (k < kc) kernel_step<R>(row, k * ks, bp + k * kNr, acc0, acc1);
  }
  const __m512 alpha = _mm512_set1_ps(t.alpha);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, bias);
    bias1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(alpha, acc0[i]);
    __m512 r1 = _mm512_mul_ps(alpha, acc1[i]);
    if (!t.first) {
      r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, ci));
      r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, ci + 16));
    } else if (t.beta != 0.0f) {
      const __m512 beta = _mm512_set1_ps(t.beta);
      const float* si = src + i * ldc;
      r0 = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m0, si), r0);
      r1 = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m1, si + 16), r1);
    }
    r0 = _mm512_add_ps(r0, bias0);
    r1 = _mm512_add_ps(r1, bias1);
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
  }
}

using KernelFn = void (*)(int64_t, APanel, const float*, float*, int64_t, __mmask16, __mmask16, const TileArgs&,
                          const float*, const float*);
// The micro-kernel for a tile of `rows` rows (1 ≤ rows ≤ kMr) and the layout of `a`.
template <bool Packed, size_t... I>
constexpr std::array<KernelFn, sizeof...(I) + 1> kernel_table(std::index_sequence<I...>) {
  return {nullptr, micro_kernel<static_cast<int>(I) + 1, Packed>...};
}
inline constexpr auto kPackedKernels = kernel_table<true>(std::make_index_sequence<kMr>{});
inline constexpr auto kInPlaceKernels = kernel_table<false>(std::make_index_sequence<kMr>{});
inline KernelFn kernel_for(int64_t rows, const APanel& a) {
  return a.k_stride == 1 ? kInPlaceKernels[rows] : kPackedKernels[rows];
}

// A grow-only, 64-byte aligned float buffer (thread-local scratch for packed operands).
class AlignedScratch {
 public:
  AlignedScratch() = default;
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { std::free(p_); }
  float* get(int64_t floats) {
    if (floats > n_) {
      std::free(p_);
      const int64_t n = (floats + 15) / 16 * 16 + 16;  // 16 floats of slack for 16-wide stores
      p_ = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * n));
      if (p_ == nullptr) throw std::bad_alloc();
      n_ = n - 16;
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  int64_t n_ = 0;
};

#pragma GCC diagnostic pop

}  // namespace dscpp::kernels::cpu::avx512
