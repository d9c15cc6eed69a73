// The ops for T5's attention (model.h ABI 8): the CPU table's (kernels/cpu/ops/biased_attention.cpp)
// against references written here, hd::relative_bucket (kernels/ops_math.h) against the buckets
// transformers computes, and the CUDA table's (kernels/cuda: ops_relative_bias.cu, ops_rows.cu)
// in host-stub mode against the CPU table, in fp32, bf16 and fp16.
//
// Tolerances, and why:
//  - relative_bias_forward is a gather: equal bit for bit to the table entries the loops pick.
//  - relative_bias_backward adds each (bucket, head)'s n terms in fp32 and then adds the sum to
//    dtable: against an fp64 sum, within (n + 2)·u·(|dtable| + Σ|terms|) per entry, the bound of
//    any summation order; a term in the wrong bucket is off by the size of a term.
//  - masked_softmax_forward against an fp64 softmax: 1e-7 absolute + 1e-5 relative, the
//    tolerance test_ops.cpp gives the plain softmax (exp_f and fp32 sums, ~1e-6 relative);
//    masked entries and queries that see no key exactly 0.
//  - The buckets equal transformers 4.44.2's T5Attention._relative_position_bucket for every
//    key − query offset −200 … 200 at T5's 32 buckets / max distance 128 and at 8 / 12, where
//    the logarithmic range saturates; tests/tools/t5_buckets.py prints them.
//  - CUDA table, fp32: the forward bit for bit (a gather); the gradient sums each diagonal and
//    then the diagonals, another order than the CPU's, so each entry within sum_tol(Tq·Tk) of its
//    |dtable| + Σ|terms| (cuda_table_check.h: rounding errors of two orders ~√K·u apart); the
//    softmax adds in a tree of doubles where the CPU adds floats in order: normwise
//    sum_tol(Tk), as test_cuda_ops_table.cpp's softmax, and the masked entries 0 in both.
//  - CUDA table, bf16 / fp16 (inputs rounded to the dtype, the CPU table given the same values in
//    fp32): the forward bit for bit; the gradient and the softmax compute in fp32 and round once
//    on the store, so 1 u16 normwise (u16 = 2⁻⁸ bf16, 2⁻¹¹ fp16), as test_cuda_ops_16bit.cpp's
//    single-rounding ops.
// Measured on these inputs: the fp32 gradients ≤ 1.6 u of their terms, the fp32 softmaxes ≤ 2e-7
// normwise, everything 16-bit ≤ 0.65 u16.
#include "core/half.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "kernels/cuda/ops_table.h"
#include "kernels/ops_args.h"
#include "kernels/ops_math.h"
#include "tests/unit/cuda_table_check.h"
#include "tests/unit/ops_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace ops_check;
using cuda_table_check::OpsContext;
using cuda_table_check::relative_to;
using cuda_table_check::Tables;
using dscpp::hd::relative_bucket;

// ---- the buckets transformers gives (tests/tools/t5_buckets.py) ------------------------------

struct HfBuckets {
  int32_t num_buckets, max_distance;
  bool bidirectional;
  const char* digits;  // base 32, one per offset −200 … 200
};

// transformers 4.44.2, relative positions -200 ... 200
const HfBuckets kHf[] = {
    {32, 128, true,
     "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
     "ffffffffffeeeeeeeeeeeeeeeeeeeeeeeeeeeddddddddddddddddddccccccccccccccbbbbbbbbbaaaaaaa999988887654321"
     "0hijklmnooooppppqqqqqqqrrrrrrrrrssssssssssssssttttttttttttttttttuuuuuuuuuuuuuuuuuuuuuuuuuuuvvvvvvvvv"
     "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
     "v"},
    {32, 128, false,
     "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvuuuuuuuuuuuu"
     "uuttttttttttttssssssssssrrrrrrrrrrqqqqqqqqpppppppoooooonnnnnnmmmmmllllkkkkjjjiiihhgggfedcba987654321"
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
     "0"},
    {8, 12, true,
     "3333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333"
     "3333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333333332221"
     "0566677777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777"
     "7777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777"
     "7"},
    {8, 12, false,
     "7777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777"
     "7777777777777777777777777777777777777777777777777777777777777777777777777777777777777777777666544321"
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
     "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
     "0"},
};
constexpr int64_t kHfFirst = -200, kHfLast = 200;

// ---- relative position bias ---------------------------------------------------------------------

struct BiasCase {
  int64_t heads, Tq, Tk, q0;
  int32_t bidirectional, num_buckets, max_distance;
};

const BiasCase kBiasCases[] = {
    {3, 5, 7, 0, 1, 32, 128},      // an encoder's self-attention
    {2, 1, 300, 299, 0, 32, 128},  // a decoder's step at position 299: keys 0 … 299
    {4, 20, 260, 0, 1, 8, 12},     // saturated buckets, keys past the table's 200
    {2, 9, 4, 3, 0, 8, 12},        // more queries than keys, queries after the keys
    {1, 64, 64, -40, 1, 32, 128},  // queries before the keys
};

void check_relative_bias(const BiasCase& c) {
  INFO("heads " << c.heads << " Tq " << c.Tq << " Tk " << c.Tk << " q0 " << c.q0 << " bidirectional "
                << c.bidirectional << " buckets " << c.num_buckets << "/" << c.max_distance);
  const int64_t n = c.heads * c.Tq * c.Tk;
  const Vec table = rnd(size_t(c.num_buckets * c.heads), 21, -2.0f, 2.0f);
  Vec out(size_t(n), kNaN);
  REQUIRE(ops().relative_bias_forward(O(), table.data(), out.data(), c.heads, c.Tq, c.Tk, c.q0, c.bidirectional,
                                      c.num_buckets, c.max_distance) == DSCPP_OK);
  Vec want(out.size());
  std::vector<int32_t> bucket(size_t(c.Tq * c.Tk));
  for (int64_t t = 0; t < c.Tq; ++t)
    for (int64_t s = 0; s < c.Tk; ++s) {
      const int32_t k = relative_bucket(s - (c.q0 + t), c.bidirectional != 0, c.num_buckets, c.max_distance);
      REQUIRE((k >= 0 && k < c.num_buckets));
      bucket[size_t(t * c.Tk + s)] = k;
      for (int64_t h = 0; h < c.heads; ++h) want[size_t((h * c.Tq + t) * c.Tk + s)] = table[size_t(k * c.heads + h)];
    }
  CHECK(bitwise(out, want));

  const Vec dout = rnd(size_t(n), 22, -1.0f, 1.0f), dtable0 = rnd(table.size(), 23);
  Vec dtable = dtable0;
  REQUIRE(ops().relative_bias_backward(O(), dout.data(), dtable.data(), c.heads, c.Tq, c.Tk, c.q0, c.bidirectional,
                                       c.num_buckets, c.max_distance) == DSCPP_OK);
  DVec sum(table.size()), mag(table.size());
  std::vector<int64_t> terms(table.size());
  for (size_t i = 0; i < table.size(); ++i) sum[i] = dtable0[i], mag[i] = std::fabs(dtable0[i]);
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t ts = 0; ts < c.Tq * c.Tk; ++ts) {
      const size_t k = size_t(bucket[size_t(ts)] * c.heads + h);
      const double g = dout[size_t(h * c.Tq * c.Tk + ts)];
      sum[k] += g, mag[k] += std::fabs(g), ++terms[k];
    }
  bool ok = true;
  for (size_t i = 0; i < table.size(); ++i)
    if (!(std::fabs(dtable[i] - sum[i]) <= double(terms[i] + 2) * kU * mag[i])) ok = false;
  CHECK(ok);
}

// ---- masked softmax -----------------------------------------------------------------------------

struct SoftmaxCase {
  int64_t batch, heads, Tq, Tk;
  int32_t causal;
  bool bias;
  std::vector<int32_t> key_len;  // one per sequence; empty: NULL
  int64_t key_len_ld;
};

// key_len spread with a stride of key_len_ld, the entries between them poison.
std::vector<int32_t> strided(const SoftmaxCase& c) {
  std::vector<int32_t> k(c.key_len.size() * size_t(c.key_len_ld), -12345);
  for (size_t b = 0; b < c.key_len.size(); ++b) k[b * size_t(c.key_len_ld)] = c.key_len[b];
  return k;
}

// fp64 softmax of scores + bias over each query's visible keys, 0 elsewhere.
DVec masked_softmax_ref(const SoftmaxCase& c, const Vec& x, const Vec& bias) {
  DVec y(x.size(), 0.0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t t = 0; t < c.Tq; ++t) {
        int64_t live = c.key_len.empty() ? c.Tk : std::clamp<int64_t>(c.key_len[size_t(b)], 0, c.Tk);
        if (c.causal != 0) live = std::min(live, t + c.Tk - c.Tq + 1);
        const int64_t row = ((b * c.heads + h) * c.Tq + t) * c.Tk, brow = (h * c.Tq + t) * c.Tk;
        DVec z(static_cast<size_t>(live));
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < live; ++k) {
          z[size_t(k)] = double(x[size_t(row + k)]) + (c.bias ? double(bias[size_t(brow + k)]) : 0.0);
          m = std::max(m, z[size_t(k)]);
        }
        for (int64_t k = 0; k < live; ++k) s += std::exp(z[size_t(k)] - m);
        for (int64_t k = 0; k < live; ++k) y[size_t(row + k)] = std::exp(z[size_t(k)] - m) / s;
      }
  return y;
}

const std::vector<SoftmaxCase>& softmax_cases() {
  static const std::vector<SoftmaxCase> c = {
      {1, 1, 1, 1, 0, false, {}, 1},
      {2, 3, 5, 5, 0, false, {}, 1},                  // a plain softmax
      {2, 3, 5, 7, 0, true, {7, 3}, 1},               // an encoder: padded keys
      {3, 2, 4, 9, 1, true, {9, 0, 20}, 2},           // causal, Tq < Tk; a sequence without keys; strided
      {2, 2, 6, 6, 1, false, {-3, 4}, 3},             // causal self-attention, lengths clamped
      {1, 2, 3, 1000, 0, true, {777}, 1},             // long rows: every vector width and tail
      {2, 1, 17, 33, 1, true, {}, 1},                 // causal with a bias, no lengths
  };
  return c;
}

void check_masked_softmax(const dscpp_ops* o, const SoftmaxCase& c, double atol, double rtol) {
  INFO("batch " << c.batch << " heads " << c.heads << " Tq " << c.Tq << " Tk " << c.Tk << " causal " << c.causal
                << " bias " << c.bias << " key_len " << c.key_len.size() << " ld " << c.key_len_ld);
  const int64_t n = c.batch * c.heads * c.Tq * c.Tk;
  const Vec x = rnd(size_t(n), 31, -4.0f, 4.0f), bias = rnd(size_t(c.heads * c.Tq * c.Tk), 32, -3.0f, 3.0f);
  const std::vector<int32_t> key_len = strided(c);
  Vec y(size_t(n), kNaN);
  REQUIRE(o->masked_softmax_forward(o, x.data(), c.bias ? bias.data() : nullptr,
                                    key_len.empty() ? nullptr : key_len.data(), c.key_len_ld, y.data(), c.batch,
                                    c.heads, c.Tq, c.Tk, c.causal) == DSCPP_OK);
  const DVec want = masked_softmax_ref(c, x, bias);
  check_close(y, want, atol, rtol);
  bool zeros = true;
  for (size_t i = 0; i < y.size(); ++i)
    if (want[i] == 0.0 && !(y[i] == 0.0f && !std::signbit(y[i]))) zeros = false;
  CHECK(zeros);
  // In place: the same bits.
  Vec inplace = x;
  REQUIRE(o->masked_softmax_forward(o, inplace.data(), c.bias ? bias.data() : nullptr,
                                    key_len.empty() ? nullptr : key_len.data(), c.key_len_ld, inplace.data(), c.batch,
                                    c.heads, c.Tq, c.Tk, c.causal) == DSCPP_OK);
  CHECK(bitwise(inplace, y));
}

}  // namespace

TEST_CASE("relative_bucket equals transformers' T5 buckets", "[ops][biased_attention]") {
  for (const HfBuckets& hf : kHf) {
    INFO(hf.num_buckets << " buckets, max distance " << hf.max_distance << ", bidirectional " << hf.bidirectional);
    REQUIRE(std::strlen(hf.digits) == size_t(kHfLast - kHfFirst + 1));
    std::string got;
    for (int64_t n = kHfFirst; n <= kHfLast; ++n) {
      const int32_t b = relative_bucket(n, hf.bidirectional, hf.num_buckets, hf.max_distance);
      got += b >= 0 && b < 32 ? "0123456789abcdefghijklmnopqrstuv"[b] : '?';
    }
    CHECK(got == hf.digits);
  }
}

TEST_CASE("relative bias on the CPU: the table's rows by bucket, and their gradient", "[ops][biased_attention]") {
  Restore restore;
  for (int threads : {1, 3}) {
    dscpp::kernels::set_cpu_threads(threads);
    CAPTURE(threads);
    for (const BiasCase& c : kBiasCases) check_relative_bias(c);
  }
}

TEST_CASE("masked softmax on the CPU: biases, key lengths, causal masks, in place", "[ops][biased_attention]") {
  Restore restore;
  for (int threads : {1, 3}) {
    dscpp::kernels::set_cpu_threads(threads);
    CAPTURE(threads);
    for (const SoftmaxCase& c : softmax_cases()) check_masked_softmax(O(), c, 1e-7, 1e-5);
  }
}

TEST_CASE("biased attention ops on the CPU: arguments refused, empty shapes accepted", "[ops][biased_attention]") {
  const int E = DSCPP_E_INVALID_ARGUMENT;
  Vec a(64, 1.0f), b(64, 1.0f);
  const int32_t len[2] = {2, 2};
  const dscpp_ops& t = ops();
  CHECK(t.relative_bias_forward(O(), nullptr, b.data(), 2, 2, 2, 0, 1, 8, 12) == E);
  CHECK(t.relative_bias_forward(O(), a.data(), nullptr, 2, 2, 2, 0, 1, 8, 12) == E);
  CHECK(t.relative_bias_forward(O(), a.data(), b.data(), -1, 2, 2, 0, 1, 8, 12) == E);
  CHECK(t.relative_bias_forward(O(), a.data(), b.data(), 2, 2, 2, 0, 1, 1, 12) == E);
  CHECK(t.relative_bias_forward(O(), a.data(), b.data(), 2, 2, 2, 0, 1, 8, 0) == E);
  CHECK(t.relative_bias_backward(O(), nullptr, b.data(), 2, 2, 2, 0, 0, 8, 12) == E);
  CHECK(t.relative_bias_backward(O(), a.data(), b.data(), 2, -2, 2, 0, 0, 8, 12) == E);
  CHECK(t.relative_bias_forward(O(), a.data(), nullptr, 2, 0, 2, 0, 1, 8, 12) == DSCPP_OK);
  CHECK(t.masked_softmax_forward(O(), a.data(), nullptr, nullptr, 1, b.data(), 1, 1, 3, 2, 1) == E);  // Tq > Tk
  CHECK(t.masked_softmax_forward(O(), a.data(), nullptr, len, 0, b.data(), 2, 1, 2, 2, 0) == E);      // ld < 1
  CHECK(t.masked_softmax_forward(O(), nullptr, nullptr, nullptr, 1, b.data(), 1, 1, 2, 2, 0) == E);
  CHECK(t.masked_softmax_forward(O(), a.data(), nullptr, nullptr, 1, nullptr, 1, 1, 2, 2, 0) == E);
  CHECK(t.masked_softmax_forward(O(), a.data(), nullptr, nullptr, 1, b.data(), -1, 1, 2, 2, 0) == E);
  CHECK(t.masked_softmax_forward(O(), nullptr, nullptr, nullptr, 1, nullptr, 2, 3, 0, 5, 0) == DSCPP_OK);
  const dscpp_ops u = dscpp::kernels::cpu_ops(DSCPP_BF16);
  CHECK(u.relative_bias_forward(&u, a.data(), b.data(), 2, 2, 2, 0, 1, 8, 12) == DSCPP_E_UNSUPPORTED);
  CHECK(u.relative_bias_backward(&u, a.data(), b.data(), 2, 2, 2, 0, 1, 8, 12) == DSCPP_E_UNSUPPORTED);
  CHECK(u.masked_softmax_forward(&u, a.data(), nullptr, nullptr, 1, b.data(), 1, 1, 2, 2, 0) == DSCPP_E_UNSUPPORTED);
}

// ---- the CUDA table in host-stub mode --------------------------------------------------------------

namespace {

// Σ|terms| + |dtable| per table entry: what a differently ordered gradient sum is relative to.
Vec gradient_terms(const BiasCase& c, const Vec& dout, const Vec& dtable0) {
  Vec mag(dtable0.size());
  for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(dtable0[i]);
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t t = 0; t < c.Tq; ++t)
      for (int64_t s = 0; s < c.Tk; ++s) {
        const int32_t k = relative_bucket(s - (c.q0 + t), c.bidirectional != 0, c.num_buckets, c.max_distance);
        mag[size_t(k * c.heads + h)] += std::fabs(dout[size_t((h * c.Tq + t) * c.Tk + s)]);
      }
  return mag;
}

int bias_forward(const dscpp_ops* o, const BiasCase& c, const void* table, void* out) {
  return o->relative_bias_forward(o, table, out, c.heads, c.Tq, c.Tk, c.q0, c.bidirectional, c.num_buckets,
                                  c.max_distance);
}
int bias_backward(const dscpp_ops* o, const BiasCase& c, const void* dout, void* dtable) {
  return o->relative_bias_backward(o, dout, dtable, c.heads, c.Tq, c.Tk, c.q0, c.bidirectional, c.num_buckets,
                                   c.max_distance);
}
int softmax(const dscpp_ops* o, const SoftmaxCase& c, const void* x, const void* bias, const int32_t* key_len,
            void* y) {
  return o->masked_softmax_forward(o, x, c.bias ? bias : nullptr, c.key_len.empty() ? nullptr : key_len, c.key_len_ld,
                                   y, c.batch, c.heads, c.Tq, c.Tk, c.causal);
}

// Values rounded to a 16-bit dtype: as fp32 (for the CPU table) and as their bits (the CUDA table).
struct Pair {
  Vec f;
  std::vector<uint16_t> h;
  bool bf16;
  Pair(const Vec& v, bool b) : f(v.size()), h(v.size()), bf16(b) {
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = b ? dscpp::float_to_bf16_bits(v[i]) : dscpp::float_to_fp16_bits(v[i]);
      f[i] = b ? dscpp::bf16_bits_to_float(h[i]) : dscpp::fp16_bits_to_float(h[i]);
    }
  }
  Vec widened() const {
    Vec r(h.size());
    for (size_t i = 0; i < h.size(); ++i)
      r[i] = bf16 ? dscpp::bf16_bits_to_float(h[i]) : dscpp::fp16_bits_to_float(h[i]);
    return r;
  }
};

}  // namespace

TEST_CASE("relative bias on the CUDA table (host stub) matches the CPU table", "[cuda_ops_table][biased_attention]") {
  Tables t;
  for (const BiasCase& c : kBiasCases) {
    INFO("heads " << c.heads << " Tq " << c.Tq << " Tk " << c.Tk << " q0 " << c.q0);
    const int64_t n = c.heads * c.Tq * c.Tk;
    const Vec table = rnd(size_t(c.num_buckets * c.heads), 41, -2.0f, 2.0f);
    Vec og(size_t(n), kNaN), oc(og.size(), kNaN);
    REQUIRE(bias_forward(t.G(), c, table.data(), og.data()) == DSCPP_OK);
    REQUIRE(bias_forward(t.C(), c, table.data(), oc.data()) == DSCPP_OK);
    CHECK(bitwise(og, oc));

    const Vec dout = rnd(size_t(n), 42), dtable0 = rnd(table.size(), 43);
    Vec dg = dtable0, dc = dtable0, again = dtable0;
    REQUIRE(bias_backward(t.G(), c, dout.data(), dg.data()) == DSCPP_OK);
    REQUIRE(bias_backward(t.C(), c, dout.data(), dc.data()) == DSCPP_OK);
    CHECK_RELATIVE_TO(dg, dc, gradient_terms(c, dout, dtable0), sum_tol(c.Tq * c.Tk));
    REQUIRE(bias_backward(t.G(), c, dout.data(), again.data()) == DSCPP_OK);
    CHECK(bitwise(again, dg));
  }
}

TEST_CASE("masked softmax on the CUDA table (host stub) matches the CPU table", "[cuda_ops_table][biased_attention]") {
  Tables t;
  std::vector<SoftmaxCase> cases = softmax_cases();
  cases.push_back({1, 1, 2, 4100, 1, true, {4099}, 1});  // rows past kWarpRowMax: a block per row
  for (const SoftmaxCase& c : cases) {
    INFO("batch " << c.batch << " heads " << c.heads << " Tq " << c.Tq << " Tk " << c.Tk << " causal " << c.causal);
    const int64_t n = c.batch * c.heads * c.Tq * c.Tk;
    const Vec x = rnd(size_t(n), 51, -4.0f, 4.0f), bias = rnd(size_t(c.heads * c.Tq * c.Tk), 52, -3.0f, 3.0f);
    const std::vector<int32_t> key_len = strided(c);
    Vec yg(size_t(n), kNaN), yc(yg.size(), kNaN);
    REQUIRE(softmax(t.G(), c, x.data(), bias.data(), key_len.data(), yg.data()) == DSCPP_OK);
    REQUIRE(softmax(t.C(), c, x.data(), bias.data(), key_len.data(), yc.data()) == DSCPP_OK);
    CHECK_NORMWISE(yg, yc, sum_tol(c.Tk));
    bool same_zeros = true;
    for (size_t i = 0; i < yg.size(); ++i)
      if ((yc[i] == 0.0f) != (yg[i] == 0.0f) || std::signbit(yg[i])) same_zeros = false;
    CHECK(same_zeros);
    Vec inplace = x;
    REQUIRE(softmax(t.G(), c, inplace.data(), bias.data(), key_len.data(), inplace.data()) == DSCPP_OK);
    CHECK(bitwise(inplace, yg));
  }
}

TEST_CASE("biased attention ops on the CUDA table (host stub) in bf16 and fp16", "[cuda_ops_16bit][biased_attention]") {
  for (bool bf16 : {true, false}) {
    CAPTURE(bf16);
    OpsContext ctx{nullptr};
    const dscpp_ops half = dscpp::cuda::cuda_ops(bf16 ? DSCPP_BF16 : DSCPP_F16, &ctx);
    const double u16 = std::ldexp(1.0, bf16 ? -8 : -11);
    for (const BiasCase& c : kBiasCases) {
      INFO("heads " << c.heads << " Tq " << c.Tq << " Tk " << c.Tk << " q0 " << c.q0);
      const int64_t n = c.heads * c.Tq * c.Tk;
      const Pair table(rnd(size_t(c.num_buckets * c.heads), 61, -2.0f, 2.0f), bf16);
      Pair out(Vec(size_t(n), kNaN), bf16);
      Vec want(static_cast<size_t>(n));
      REQUIRE(bias_forward(&half, c, table.h.data(), out.h.data()) == DSCPP_OK);
      REQUIRE(bias_forward(O(), c, table.f.data(), want.data()) == DSCPP_OK);
      CHECK(bitwise(out.widened(), want));
      const Pair dout(rnd(size_t(n), 62), bf16);
      Pair dtable(rnd(table.f.size(), 63), bf16);
      REQUIRE(bias_backward(&half, c, dout.h.data(), dtable.h.data()) == DSCPP_OK);
      REQUIRE(bias_backward(O(), c, dout.f.data(), dtable.f.data()) == DSCPP_OK);
      CHECK_NORMWISE(dtable.widened(), dtable.f, u16);
    }
    for (const SoftmaxCase& c : softmax_cases()) {
      INFO("batch " << c.batch << " heads " << c.heads << " Tq " << c.Tq << " Tk " << c.Tk << " causal " << c.causal);
      const int64_t n = c.batch * c.heads * c.Tq * c.Tk;
      const Pair x(rnd(size_t(n), 64, -4.0f, 4.0f), bf16);
      const Pair bias(rnd(size_t(c.heads * c.Tq * c.Tk), 65, -3.0f, 3.0f), bf16);
      const std::vector<int32_t> key_len = strided(c);
      Pair y(Vec(size_t(n), kNaN), bf16);
      Vec want(static_cast<size_t>(n));
      REQUIRE(softmax(&half, c, x.h.data(), bias.h.data(), key_len.data(), y.h.data()) == DSCPP_OK);
      REQUIRE(softmax(O(), c, x.f.data(), bias.f.data(), key_len.data(), want.data()) == DSCPP_OK);
      CHECK_NORMWISE(y.widened(), want, u16);
    }
  }
}

TEST_CASE("biased attention ops: the CUDA table refuses what the CPU table refuses, and undefined buckets",
          "[cuda_ops_table][biased_attention]") {
  Tables t;
  const int E = DSCPP_E_INVALID_ARGUMENT;
  Vec a(64, 1.0f), b(64, 1.0f);
  const int32_t len[2] = {2, 2};
  for (const dscpp_ops* o : {t.C(), t.G()}) {
    CHECK(o->relative_bias_forward(o, nullptr, b.data(), 2, 2, 2, 0, 1, 8, 12) == E);
    CHECK(o->relative_bias_forward(o, a.data(), b.data(), 2, 2, -2, 0, 1, 8, 12) == E);
    CHECK(o->relative_bias_forward(o, a.data(), b.data(), 2, 2, 2, 0, 0, 1, 12) == E);
    CHECK(o->relative_bias_backward(o, a.data(), nullptr, 2, 2, 2, 0, 0, 8, 12) == E);
    CHECK(o->relative_bias_backward(o, a.data(), b.data(), 2, 2, 2, 0, 0, 8, 0) == E);
    CHECK(o->relative_bias_backward(o, nullptr, b.data(), 2, 0, 2, 0, 0, 8, 12) == DSCPP_OK);
    CHECK(o->masked_softmax_forward(o, a.data(), nullptr, nullptr, 1, b.data(), 1, 1, 3, 2, 1) == E);
    CHECK(o->masked_softmax_forward(o, a.data(), nullptr, len, 0, b.data(), 2, 1, 2, 2, 0) == E);
    CHECK(o->masked_softmax_forward(o, a.data(), b.data(), nullptr, 1, nullptr, 1, 1, 2, 2, 0) == E);
    CHECK(o->masked_softmax_forward(o, a.data(), nullptr, nullptr, 1, b.data(), 1, -1, 2, 2, 0) == E);
    CHECK(o->masked_softmax_forward(o, nullptr, nullptr, nullptr, 1, nullptr, 3, 2, 4, 0, 1) == E);  // Tq > Tk
    CHECK(o->masked_softmax_forward(o, nullptr, nullptr, nullptr, 1, nullptr, 3, 2, 0, 4, 1) == DSCPP_OK);
  }
  // Bucket tables whose logarithm is undefined (an empty exact range, or max_distance ≤ the exact
  // range, which gives buckets below 0): the shared rule, which the CUDA table applies.
  using dscpp::kernels::relative_bias_args_ok;
  CHECK(relative_bias_args_ok(2, 3, 4, 1, 32, 128));
  CHECK(relative_bias_args_ok(2, 3, 4, 0, 2, 2));
  CHECK_FALSE(relative_bias_args_ok(2, 3, 4, 1, 2, 128));  // bidirectional: 1 bucket per side, e = 0
  CHECK_FALSE(relative_bias_args_ok(2, 3, 4, 1, 32, 8));   // e = 8
  CHECK_FALSE(relative_bias_args_ok(2, 3, 4, 0, 32, 4));   // e = 16
  CHECK(t.G()->relative_bias_forward(t.G(), a.data(), b.data(), 1, 2, 2, 0, 1, 32, 8) == E);
  CHECK(t.G()->relative_bias_backward(t.G(), a.data(), b.data(), 1, 2, 2, 0, 1, 3, 12) == E);
}
