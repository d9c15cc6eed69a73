// Tiled attention: the flash entries in FlashAttention-2's schedule on the table's own kernels,
// with no score matrix outside shared memory. The blockwise path of ops_attention.cu writes one
// block of queries' scores to device memory and reads it back three times; on an H200 it took
// about 4 ms per gpt block at T = 1024 (ncu), the largest part of the fp32 gap to PyTorch.
// Whether these kernels are faster is the GPU benchmark's to say (docs/gpu.md); they take fp32
// runs (cuDNN's fused attention computes only in 16 bits) and the masked entries in any dtype
// (cuDNN is not given those) when DSCPP_FLASH_ATTENTION=tiled.
//
// A block of 256 threads works on one (sequence, head) pair and one tile of 64 queries
// (forward, dq) or 64 keys (dk, dv), looping over the tiles of the other side that the mask
// leaves any work in. Every product of two tiles runs on the 16 × 16 thread grid, each thread a
// 4 × 4 (4 × 8 for head widths up to 128) block of the result with four-float shared-memory
// loads: eight FMAs per load, where a one-thread-per-row kernel gets four at best. Operands sit in
// shared memory in the layout their product reads (launch.h's tile contract: phases between
// barriers), so each tensor that a product needs feature-major is transposed once per block,
// never per tile.
//
//   forward, per query tile: Qᵀ once; per key tile: K, V; Sᵀ = K·Qᵀ; the online softmax per
//     query (running max and sum, FlashAttention-2's rescaling of the output rows); O += P·V.
//     Then O / l and the log-sum-exp the backward pass reads.
//   dq, per query tile: Qᵀ, dOᵀ once; per key tile: K, V; Sᵀ, dPᵀ = V·dOᵀ, the score
//     gradient dS = scale·P·(dP − delta) (as the blockwise path's); dQ += dS·K.
//   dk and dv, per key tile: Kᵀ, Vᵀ once; per query tile: Q, dO; S, dP; dV += Pᵀ·dO,
//     dK += dSᵀ·Q.
// dq and dk/dv are separate kernels (recomputing S and dP) so that every result is summed by
// one thread in a fixed order: no atomics, the same bits on every run (ops_kernels.h's rule).
// Arithmetic in fp32 whatever the storage (elems.h), one rounding per stored element.
#include "kernels/cuda/ops_kernels.h"
#include "kernels/hd.h"
#include "kernels/ops_math.h"

#include <cstdint>
#include <initializer_list>

// Loops over a thread's register blocks unroll fully (their arrays must stay in registers); the
// loops over a product's inner dimension unroll by four steps only, which halves this file's
// compile time (nvcc for sm_90: 10 s, 21 s fully unrolled) at no cost in registers.
#if defined(__CUDA_ARCH__)
#define DSCPP_UNROLL _Pragma("unroll")
#define DSCPP_UNROLL_SOME _Pragma("unroll 4")
#else
#define DSCPP_UNROLL
#define DSCPP_UNROLL_SOME
#endif

namespace dscpp::DSCPP_CUDA_NS::ops {
namespace {

using hd::hd_fma;

constexpr int kT = 64;                           // queries or keys per tile
constexpr int kGrid = 16;                        // the thread grid over a tile product is kGrid × kGrid
constexpr unsigned kTileThreads = kGrid * kGrid;
// Feature-major tiles ([d][token]) are written one column per thread group when transposed;
// rows of kT + 4 floats put a group's columns in different banks (and keep rows 16-byte aligned).
constexpr int kRowsT = kT + 4;
constexpr float kNoScore = -3.402823466e38f;

using F4 = Quad<float>;
DSCPP_HD inline F4 ld4(const float* p) { return *reinterpret_cast<const F4*>(p); }
DSCPP_HD inline void st4(float* p, const F4& v) { *reinterpret_cast<F4*>(p) = v; }

// ---- the tile products --------------------------------------------------------------------------

// For thread (ty, tx) of the grid: acc[r][4j + c] += Σ_k A(4ty + r, k)·B(k, 4tx + 64j + c), the
// result a 64 × 64·NJ tile. B is k-major (B[k·ldb + n]); A is k-major (A[k·lda + m]) or, in
// mma_rows, row-major (A[m·lda + k]). Pointers and leading dimensions 16-byte aligned.
template <int K, int NJ>
DSCPP_HD inline void mma_cols(const float* A, int lda, const float* B, int ldb, int ty, int tx,
                              float (&acc)[4][4 * NJ]) {
  DSCPP_UNROLL_SOME
  for (int k = 0; k < K; ++k) {
    const F4 a = ld4(A + k * lda + 4 * ty);
    DSCPP_UNROLL
    for (int j = 0; j < NJ; ++j) {
      const F4 b = ld4(B + k * ldb + 4 * tx + 64 * j);
      DSCPP_UNROLL
      for (int r = 0; r < 4; ++r)
        DSCPP_UNROLL
        for (int c = 0; c < 4; ++c) acc[r][4 * j + c] = hd_fma(a.v[r], b.v[c], acc[r][4 * j + c]);
    }
  }
}
template <int K, int NJ>
DSCPP_HD inline void mma_rows(const float* A, int lda, const float* B, int ldb, int ty, int tx,
                              float (&acc)[4][4 * NJ]) {
  DSCPP_UNROLL_SOME
  for (int k = 0; k < K; k += 4) {
    F4 a[4];
    DSCPP_UNROLL
    for (int r = 0; r < 4; ++r) a[r] = ld4(A + (4 * ty + r) * lda + k);
    DSCPP_UNROLL
    for (int kk = 0; kk < 4; ++kk)
      DSCPP_UNROLL
      for (int j = 0; j < NJ; ++j) {
        const F4 b = ld4(B + (k + kk) * ldb + 4 * tx + 64 * j);
        DSCPP_UNROLL
        for (int r = 0; r < 4; ++r)
          DSCPP_UNROLL
          for (int c = 0; c < 4; ++c) acc[r][4 * j + c] = hd_fma(a[r].v[kk], b.v[c], acc[r][4 * j + c]);
      }
  }
}

template <int N>
DSCPP_HD inline void zero(float (&acc)[4][N]) {
  DSCPP_UNROLL
  for (int r = 0; r < 4; ++r)
    DSCPP_UNROLL
    for (int c = 0; c < N; ++c) acc[r][c] = 0.0f;
}

// ---- where the tensors are ----------------------------------------------------------------------

// qkv is batch × T rows of 3C (head h's q at h·D, k at C + h·D, v at 2C + h·D); out, dout are
// rows of C.
struct Geometry {
  int64_t batch, T, heads, D;
  const int32_t* first_key;  // null: causal; query t of sequence b sees first_key[b·first_ld + t] … t
  int64_t first_ld;
  float scale;
  bool vec;  // fp32 tensors, D a multiple of 4, 16-byte aligned: four-float loads and stores
  DSCPP_HD int64_t C() const { return heads * D; }
  DSCPP_HD int64_t tiles() const { return ceil_div(T, kT); }
  DSCPP_HD int64_t pairs() const { return batch * heads; }
  // The first key query t of sequence b sees (clamped to 0 … t).
  DSCPP_HD int32_t first(int64_t b, int64_t t) const {
    if (first_key == nullptr) return 0;
    const int64_t f = first_key[b * first_ld + t];
    return int32_t(f < 0 ? 0 : f > t ? t : f);
  }
};

// Block `block`'s sequence, head and tile. Blocks run roughly in index order, so the heavy
// tiles go first: a causal query tile's work grows with its index, a key tile's shrinks.
struct Work {
  int64_t b, h, t0;  // t0: the tile's first query (or key)
};
DSCPP_HD inline Work work_of(const Geometry& g, unsigned block, bool query_tiles) {
  const QuotRem tp = divmod(int64_t(block), g.pairs()), bh = divmod(tp.rem, g.heads);
  const int64_t tile = query_tiles ? g.tiles() - 1 - tp.quot : tp.quot;
  return {bh.quot, bh.rem, tile * kT};
}

// Four features d … d+3 of row `row` (a batch·T index) of a head's columns starting at col,
// zero beyond D.
DSCPP_HD inline F4 load_feat(Src x, const Geometry& g, int64_t width, int64_t col, int64_t row, int d) {
  const int64_t at = row * width + col + d;
  if (g.vec) return *reinterpret_cast<const F4*>(x.f32() + at);
  F4 v;
  for (int c = 0; c < 4; ++c) v.v[c] = d + c < g.D ? x[at + c] : 0.0f;
  return v;
}
DSCPP_HD inline void store_feat(Dst y, const Geometry& g, int64_t width, int64_t col, int64_t row, int d,
                                const F4& v) {
  const int64_t at = row * width + col + d;
  if (g.vec) {
    *reinterpret_cast<F4*>(y.f32() + at) = v;
    return;
  }
  for (int c = 0; c < 4; ++c)
    if (d + c < g.D) y[at + c] = v.v[c];
}

// One tile of kT tokens (t0 … of sequence b; zero rows past T) of a head's columns into shared
// memory: token-major ([i][d], rows of DM) or feature-major ([d][i], rows of kRowsT). Each
// thread moves four features of a row per pass.
template <int DM>
DSCPP_HD inline void load_tile(const Thread& t, const Geometry& g, Src x, int64_t width, int64_t col, int64_t b,
                               int64_t t0, float* dst, bool feature_major) {
  constexpr int kPerRow = DM / 4, kRowsPerPass = int(kTileThreads) / kPerRow;
  const int d = 4 * (int(t.thread) % kPerRow);
  for (int i = int(t.thread) / kPerRow; i < kT; i += kRowsPerPass) {
    F4 v = {{0.0f, 0.0f, 0.0f, 0.0f}};
    if (t0 + i < g.T && d < g.D) v = load_feat(x, g, width, col, b * g.T + t0 + i, d);
    if (feature_major) {
      for (int c = 0; c < 4; ++c) dst[(d + c) * kRowsT + i] = v.v[c];
    } else {
      st4(dst + i * DM + d, v);
    }
  }
}

// Part `part` (0: q, 1: k, 2: v) of qkv, or the output gradient, for the block's head over the
// tile of tokens t0 …: load_tile at that tensor's width and the head's columns.
template <int DM>
DSCPP_HD inline void load_qkv(const Thread& t, const Geometry& g, Src qkv, int part, const Work& w, int64_t t0,
                              float* dst, bool feature_major) {
  load_tile<DM>(t, g, qkv, 3 * g.C(), part * g.C() + w.h * g.D, w.b, t0, dst, feature_major);
}
template <int DM>
DSCPP_HD inline void load_dout(const Thread& t, const Geometry& g, Src dout, const Work& w, int64_t t0, float* dst,
                               bool feature_major) {
  load_tile<DM>(t, g, dout, g.C(), w.h * g.D, w.b, t0, dst, feature_major);
}

// A 64 × DM result tile (rows 4ty + r of tile t0, features 4tx + 64j + c) to a head's columns.
template <int NJ>
DSCPP_HD inline void store_rows(const Thread& t, const Geometry& g, Dst y, int64_t width, int64_t col, int64_t b,
                                int64_t t0, const float (&acc)[4][4 * NJ], const float* row_scale) {
  const int ty = int(t.thread) / kGrid, tx = int(t.thread) % kGrid;
  DSCPP_UNROLL
  for (int r = 0; r < 4; ++r) {
    const int i = 4 * ty + r;
    const float s = row_scale != nullptr && t0 + i < g.T ? 1.0f / row_scale[i] : 1.0f;
    DSCPP_UNROLL
    for (int j = 0; j < NJ; ++j) {
      const int d = 4 * tx + 64 * j;
      F4 v;
      DSCPP_UNROLL
      for (int c = 0; c < 4; ++c) v.v[c] = acc[r][4 * j + c] * s;
      if (t0 + i < g.T && d < g.D) store_feat(y, g, width, col, b * g.T + t0 + i, d, v);
    }
  }
}

// The key tiles a query tile t0 works through, from the one holding its queries' earliest first
// key (first: kT entries, T for rows past the end) to the one holding its last query.
struct KeyTiles {
  int64_t lo;
  int count;
};
DSCPP_HD inline KeyTiles key_tiles(const Geometry& g, int64_t t0, const int32_t* first) {
  int32_t lo = first[0];
  for (int i = 1; i < kT; ++i) lo = first[i] < lo ? first[i] : lo;
  const int64_t last = t0 + kT - 1 < g.T - 1 ? t0 + kT - 1 : g.T - 1;
  return {lo / kT, int(last / kT - lo / kT + 1)};
}

// Threads i < kT note query t0 + i's first key (T past the end).
DSCPP_HD inline void note_first(const Thread& t, const Geometry& g, int64_t b, int64_t t0, int32_t* first) {
  if (t.thread >= unsigned(kT)) return;
  const int64_t q = t0 + t.thread;
  first[t.thread] = q < g.T ? g.first(b, q) : int32_t(g.T);
}

// ---- forward ------------------------------------------------------------------------------------

// The online softmax runs on all 256 threads: query i's keys in four parts of 16, thread
// (part, i) = (tid / 64, tid % 64); the parts' maxima and sums meet in shared memory.
constexpr int kParts = int(kTileThreads) / kT, kPartKeys = kT / kParts;

template <int DM>
struct Forward {
  static constexpr unsigned kThreads = kTileThreads;
  static constexpr int kPhases = 5;
  static constexpr int NJ = DM / 64;
  struct Shared {
    alignas(16) float qt[DM][kRowsT];  // the query tile, feature-major
    alignas(16) float k[kT][DM];       // the key tile
    alignas(16) float v[kT][DM];
    alignas(16) float s[kT][kT];       // Sᵀ[key][query], then P in place
    float part_max[kParts][kT], part_sum[kParts][kT];
    float m[2][kT];  // per query: the running max of scale·s before step s in m[s % 2]
    float corr[kT];  // per query: e^(old max − new max), this step's rescaling
    float l[kT];     // per query: Σ e^(scale·s − max) so far
    int32_t first[kT];
  };
  struct Local {
    float o[4][4 * NJ];  // rows 4ty + r of O, features 4tx + 64j + c
    float m, l;          // thread i < kT: query i's running max and sum
    int64_t key_tile0;   // the first key tile (key_tiles), noted at step 0
  };
  Geometry g;
  Src qkv;
  float* lse;
  Dst out;

  DSCPP_HD void begin(const Thread& t, Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, true);
    zero(loc.o);
    loc.m = kNoScore, loc.l = 0.0f;
    load_qkv<DM>(t, g, qkv, 0, w, w.t0, &sh.qt[0][0], true);
    note_first(t, g, w.b, w.t0, sh.first);
    if (t.thread < unsigned(kT)) sh.m[0][t.thread] = kNoScore;
  }
  DSCPP_HD int steps(const Thread& t, const Shared& sh) const {
    return key_tiles(g, work_of(g, t.block, true).t0, sh.first).count;
  }
  DSCPP_HD void phase(int p, const Thread& t, int step, Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, true);
    const int ty = int(t.thread) / kGrid, tx = int(t.thread) % kGrid;
    const int i = int(t.thread) % kT, part = int(t.thread) / kT;
    if (p == 0 && step == 0) loc.key_tile0 = key_tiles(g, w.t0, sh.first).lo;
    const int64_t k0 = (loc.key_tile0 + step) * kT;
    const int64_t q = w.t0 + i, f = sh.first[i];
    // Whether query i sees key j of the tile.
    auto sees = [&](int j) { return q < g.T && k0 + j <= q && k0 + j >= f; };
    if (p == 0) {  // the key and value tiles
      load_qkv<DM>(t, g, qkv, 1, w, k0, &sh.k[0][0], false);
      load_qkv<DM>(t, g, qkv, 2, w, k0, &sh.v[0][0], false);
    } else if (p == 1) {  // Sᵀ = K·Qᵀ: rows keys, columns queries
      float s[4][4];
      zero(s);
      mma_rows<DM, 1>(&sh.k[0][0], DM, &sh.qt[0][0], kRowsT, ty, tx, s);
      DSCPP_UNROLL
      for (int r = 0; r < 4; ++r) st4(&sh.s[4 * ty + r][4 * tx], F4{{s[r][0], s[r][1], s[r][2], s[r][3]}});
    } else if (p == 2) {  // each part's max of scale·s over the keys query i sees
      float mx = kNoScore;
      DSCPP_UNROLL
      for (int j = part * kPartKeys; j < (part + 1) * kPartKeys; ++j)
        if (sees(j)) mx = g.scale * sh.s[j][i] > mx ? g.scale * sh.s[j][i] : mx;
      sh.part_max[part][i] = mx;
    } else if (p == 3) {  // the new max, the probabilities and each part's sum
      const float old = sh.m[step % 2][i];
      float m = old;
      DSCPP_UNROLL
      for (int k = 0; k < kParts; ++k) m = sh.part_max[k][i] > m ? sh.part_max[k][i] : m;
      float sum = 0.0f;
      DSCPP_UNROLL
      for (int j = part * kPartKeys; j < (part + 1) * kPartKeys; ++j) {
        const float pj = sees(j) ? hd::exp_f(g.scale * sh.s[j][i] - m) : 0.0f;
        sh.s[j][i] = pj;
        sum += pj;
      }
      sh.part_sum[part][i] = sum;
      if (part == 0) {
        sh.m[(step + 1) % 2][i] = m;
        sh.corr[i] = hd::exp_f(old - m);
        loc.m = m;
      }
    } else {  // l = l·corr + Σ parts; O = O·corr + P·V
      if (part == 0) {
        float sum = 0.0f;
        DSCPP_UNROLL
        for (int k = 0; k < kParts; ++k) sum += sh.part_sum[k][i];
        loc.l = loc.l * sh.corr[i] + sum;
        sh.l[i] = loc.l;
      }
      DSCPP_UNROLL
      for (int r = 0; r < 4; ++r) {
        const float corr = sh.corr[4 * ty + r];
        DSCPP_UNROLL
        for (int c = 0; c < 4 * NJ; ++c) loc.o[r][c] *= corr;
      }
      mma_cols<kT, NJ>(&sh.s[0][0], kT, &sh.v[0][0], DM, ty, tx, loc.o);
    }
  }
  DSCPP_HD void end(const Thread& t, const Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, true);
    store_rows<NJ>(t, g, out, g.C(), w.h * g.D, w.b, w.t0, loc.o, sh.l);
    if (t.thread < unsigned(kT) && w.t0 + t.thread < g.T)
      lse[(w.b * g.heads + w.h) * g.T + w.t0 + t.thread] = loc.m + hd::log_f(loc.l);
  }
};

// ---- backward -----------------------------------------------------------------------------------

// The score gradient of one element, as the blockwise path's: p = e^(scale·s − lse),
// ds = scale·p·(dp − delta); both 0 where query q does not see key u.
DSCPP_HD inline void score_grad(const Geometry& g, int64_t q, int64_t u, int64_t first, float s, float dp, float lse,
                                float delta, float& p, float& ds) {
  if (q >= g.T || u > q || u < first) {
    p = 0.0f, ds = 0.0f;
    return;
  }
  p = hd::exp_f(g.scale * s - lse);
  ds = g.scale * p * (dp - delta);
}

// Threads i < kT note query t0 + i's log-sum-exp and delta (0 past the end).
DSCPP_HD inline void note_stats(const Thread& t, const Geometry& g, const Work& w, int64_t t0, const float* lse,
                                const float* delta, float* lse_out, float* delta_out) {
  if (t.thread >= unsigned(kT)) return;
  const int64_t q = t0 + t.thread, at = (w.b * g.heads + w.h) * g.T + q;
  lse_out[t.thread] = q < g.T ? lse[at] : 0.0f;
  delta_out[t.thread] = q < g.T ? delta[at] : 0.0f;
}

// dQ per query tile.
template <int DM>
struct BackwardQ {
  static constexpr unsigned kThreads = kTileThreads;
  static constexpr int kPhases = 3;
  static constexpr int NJ = DM / 64;
  struct Shared {
    alignas(16) float qt[DM][kRowsT];  // the query tile, feature-major
    alignas(16) float gt[DM][kRowsT];  // its output gradient, feature-major
    alignas(16) float k[kT][DM];
    alignas(16) float v[kT][DM];
    alignas(16) float ds[kT][kT];  // dSᵀ[key][query]
    float lse[kT], delta[kT];
    int32_t first[kT];
  };
  struct Local {
    float dq[4][4 * NJ];
    int64_t key_tile0;
  };
  Geometry g;
  Src qkv, dout;
  const float *lse, *delta;
  Dst dqkv;

  DSCPP_HD void begin(const Thread& t, Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, true);
    zero(loc.dq);
    load_qkv<DM>(t, g, qkv, 0, w, w.t0, &sh.qt[0][0], true);
    load_dout<DM>(t, g, dout, w, w.t0, &sh.gt[0][0], true);
    note_first(t, g, w.b, w.t0, sh.first);
    note_stats(t, g, w, w.t0, lse, delta, sh.lse, sh.delta);
  }
  DSCPP_HD int steps(const Thread& t, const Shared& sh) const {
    return key_tiles(g, work_of(g, t.block, true).t0, sh.first).count;
  }
  DSCPP_HD void phase(int p, const Thread& t, int step, Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, true);
    const int ty = int(t.thread) / kGrid, tx = int(t.thread) % kGrid;
    if (p == 0 && step == 0) loc.key_tile0 = key_tiles(g, w.t0, sh.first).lo;
    const int64_t k0 = (loc.key_tile0 + step) * kT;
    if (p == 0) {
      load_qkv<DM>(t, g, qkv, 1, w, k0, &sh.k[0][0], false);
      load_qkv<DM>(t, g, qkv, 2, w, k0, &sh.v[0][0], false);
    } else if (p == 1) {  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (rows keys 4ty + r, columns queries 4tx + c) → dSᵀ
      float s[4][4], dp[4][4];
      zero(s), zero(dp);
      mma_rows<DM, 1>(&sh.k[0][0], DM, &sh.qt[0][0], kRowsT, ty, tx, s);
      mma_rows<DM, 1>(&sh.v[0][0], DM, &sh.gt[0][0], kRowsT, ty, tx, dp);
      DSCPP_UNROLL
      for (int r = 0; r < 4; ++r) {
        F4 row;
        DSCPP_UNROLL
        for (int c = 0; c < 4; ++c) {
          const int i = 4 * tx + c;
          float pr;
          score_grad(g, w.t0 + i, k0 + 4 * ty + r, sh.first[i], s[r][c], dp[r][c], sh.lse[i], sh.delta[i], pr,
                     row.v[c]);
        }
        st4(&sh.ds[4 * ty + r][4 * tx], row);
      }
    } else {  // dQ += dS·K
      mma_cols<kT, NJ>(&sh.ds[0][0], kT, &sh.k[0][0], DM, ty, tx, loc.dq);
    }
  }
  DSCPP_HD void end(const Thread& t, const Shared&, Local& loc) const {
    const Work w = work_of(g, t.block, true);
    store_rows<NJ>(t, g, dqkv, 3 * g.C(), w.h * g.D, w.b, w.t0, loc.dq, nullptr);
  }
};

// dK and dV per key tile.
template <int DM>
struct BackwardKV {
  static constexpr unsigned kThreads = kTileThreads;
  static constexpr int kPhases = 3;
  static constexpr int NJ = DM / 64;
  struct Shared {
    alignas(16) float kt[DM][kRowsT];  // the key tile, feature-major
    alignas(16) float vt[DM][kRowsT];
    alignas(16) float q[kT][DM];  // the query tile
    alignas(16) float go[kT][DM];  // its output gradient
    alignas(16) float p[kT][kT];  // P[query][key]
    alignas(16) float ds[kT][kT];
    float lse[kT], delta[kT];
    int32_t first[kT];
    int32_t last[kTileThreads];  // begin: per thread, the last query it found that sees the key tile
  };
  struct Local {
    float dk[4][4 * NJ], dv[4][4 * NJ];  // rows keys 4ty + r, features 4tx + 64j + c
  };
  Geometry g;
  Src qkv, dout;
  const float *lse, *delta;
  Dst dqkv;

  // The query tiles from the key tile's own (no earlier query sees its keys) to the one holding
  // the last query that sees any of them: T − 1 when causal; else found by scanning the first
  // keys, each thread every kTileThreads-th query.
  DSCPP_HD void begin(const Thread& t, Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, false);
    zero(loc.dk), zero(loc.dv);
    load_qkv<DM>(t, g, qkv, 1, w, w.t0, &sh.kt[0][0], true);
    load_qkv<DM>(t, g, qkv, 2, w, w.t0, &sh.vt[0][0], true);
    int64_t last = -1;
    if (g.first_key == nullptr) {
      last = g.T - 1;
    } else {
      const int64_t key_end = w.t0 + kT - 1;
      for (int64_t q = w.t0 + t.thread; q < g.T; q += kTileThreads)
        if (g.first(w.b, q) <= key_end) last = q;
    }
    sh.last[t.thread] = int32_t(last);
  }
  DSCPP_HD int steps(const Thread& t, const Shared& sh) const {
    int32_t last = sh.last[0];
    for (unsigned i = 1; i < kTileThreads; ++i) last = sh.last[i] > last ? sh.last[i] : last;
    const int64_t lo = work_of(g, t.block, false).t0 / kT;
    return last < 0 ? 0 : int(last / kT - lo + 1);
  }
  DSCPP_HD void phase(int p, const Thread& t, int step, Shared& sh, Local& loc) const {
    const Work w = work_of(g, t.block, false);
    const int ty = int(t.thread) / kGrid, tx = int(t.thread) % kGrid;
    const int64_t q0 = w.t0 + int64_t(step) * kT;
    if (p == 0) {  // the query tile, its output gradient and statistics
      load_qkv<DM>(t, g, qkv, 0, w, q0, &sh.q[0][0], false);
      load_dout<DM>(t, g, dout, w, q0, &sh.go[0][0], false);
      note_first(t, g, w.b, q0, sh.first);
      note_stats(t, g, w, q0, lse, delta, sh.lse, sh.delta);
    } else if (p == 1) {  // S = Q·Kᵀ and dP = dO·Vᵀ (rows queries 4ty + r, columns keys 4tx + c) → P, dS
      float s[4][4], dp[4][4];
      zero(s), zero(dp);
      mma_rows<DM, 1>(&sh.q[0][0], DM, &sh.kt[0][0], kRowsT, ty, tx, s);
      mma_rows<DM, 1>(&sh.go[0][0], DM, &sh.vt[0][0], kRowsT, ty, tx, dp);
      DSCPP_UNROLL
      for (int r = 0; r < 4; ++r) {
        const int i = 4 * ty + r;
        F4 prow, dsrow;
        DSCPP_UNROLL
        for (int c = 0; c < 4; ++c)
          score_grad(g, q0 + i, w.t0 + 4 * tx + c, sh.first[i], s[r][c], dp[r][c], sh.lse[i], sh.delta[i],
                     prow.v[c], dsrow.v[c]);
        st4(&sh.p[i][4 * tx], prow);
        st4(&sh.ds[i][4 * tx], dsrow);
      }
    } else {  // dV += Pᵀ·dO, dK += dSᵀ·Q
      mma_cols<kT, NJ>(&sh.p[0][0], kT, &sh.go[0][0], DM, ty, tx, loc.dv);
      mma_cols<kT, NJ>(&sh.ds[0][0], kT, &sh.q[0][0], DM, ty, tx, loc.dk);
    }
  }
  DSCPP_HD void end(const Thread& t, const Shared&, Local& loc) const {
    const Work w = work_of(g, t.block, false);
    const int64_t C = g.C();
    store_rows<NJ>(t, g, dqkv, 3 * C, C + w.h * g.D, w.b, w.t0, loc.dk, nullptr);
    store_rows<NJ>(t, g, dqkv, 3 * C, 2 * C + w.h * g.D, w.b, w.t0, loc.dv, nullptr);
  }
};

Geometry geometry(const FlashShape& f, std::initializer_list<const void*> tensors, bool all_f32) {
  bool aligned = all_f32 && f.head_dim % 4 == 0;
  for (const void* p : tensors) aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  return {f.batch, f.T, f.heads, f.head_dim, f.first_key, f.first_ld, f.scale, aligned};
}

unsigned blocks_of(const Geometry& g) {
  return unsigned(g.pairs() * g.tiles());
}

}  // namespace

// The largest block of a head width's kernels is dk/dv's: 166 KB at width 128, more than an
// A100 gives a block (163 KB), which then takes the blockwise path at that width.
bool flash_tiles_fit(int64_t batch, int64_t T, int64_t heads, int64_t head_dim) {
  if (head_dim < 1 || head_dim > 128 || batch * heads * ceil_div(T, kT) >= (int64_t(1) << 31)) return false;
  static_assert(sizeof(BackwardKV<64>::Shared) >= sizeof(Forward<64>::Shared) &&
                    sizeof(BackwardKV<64>::Shared) >= sizeof(BackwardQ<64>::Shared) &&
                    sizeof(BackwardKV<128>::Shared) >= sizeof(Forward<128>::Shared) &&
                    sizeof(BackwardKV<128>::Shared) >= sizeof(BackwardQ<128>::Shared),
                "dk/dv's block is the largest");
  return flash_tiles_shared_bytes(head_dim) <= max_tile_shared_bytes();
}

size_t flash_tiles_shared_bytes(int64_t head_dim) {
  return head_dim <= 64 ? sizeof(BackwardKV<64>::Shared) : sizeof(BackwardKV<128>::Shared);
}

Status flash_tiles_forward(Src qkv, float* lse, Dst out, const FlashShape& f, Stream s) {
  const Geometry g = geometry(f, {qkv.p, out.p}, qkv.is_f32() && out.is_f32());
  if (g.pairs() == 0 || g.T == 0) return kOk;
  if (g.D <= 64) return launch_tiles(blocks_of(g), s, Forward<64>{g, qkv, lse, out});
  return launch_tiles(blocks_of(g), s, Forward<128>{g, qkv, lse, out});
}

Status flash_tiles_backward(Src qkv, Src out, const float* lse, Src dout, Dst dqkv, float* delta,
                            const FlashShape& f, Stream s) {
  const Geometry g = geometry(f, {qkv.p, dout.p, dqkv.p}, qkv.is_f32() && dout.is_f32() && dqkv.is_f32());
  if (g.pairs() == 0 || g.T == 0) return kOk;
  Status st = attention_delta(out, dout, delta, g.batch, g.T, g.heads, g.D, s);
  if (st != kOk) return st;
  if (g.D <= 64) {
    st = launch_tiles(blocks_of(g), s, BackwardQ<64>{g, qkv, dout, lse, delta, dqkv});
    return st != kOk ? st : launch_tiles(blocks_of(g), s, BackwardKV<64>{g, qkv, dout, lse, delta, dqkv});
  }
  st = launch_tiles(blocks_of(g), s, BackwardQ<128>{g, qkv, dout, lse, delta, dqkv});
  return st != kOk ? st : launch_tiles(blocks_of(g), s, BackwardKV<128>{g, qkv, dout, lse, delta, dqkv});
}

}  // namespace dscpp::DSCPP_CUDA_NS::ops
