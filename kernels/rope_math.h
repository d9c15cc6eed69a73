// Rotary position embedding math shared by the CPU and CUDA tables' rope ops (model.h's
// dscpp_rope): the frequency table, made once per call on the host in fp32 the way Hugging
// Face's rotary classes make theirs (so positions rotate by the same angles as in transformers),
// and the rotation of one pair, for a CPU loop and a CUDA thread alike.
//
// The table travels by value (a CUDA kernel argument): 128 frequencies cover a rotary
// dimension of 256, the largest head any current model uses.
#pragma once

#include "dscpp/model.h"
#include "kernels/hd.h"

#include <cmath>
#include <cstdint>

namespace dscpp::hd {

struct RopeTable {
  static constexpr int kMaxPairs = 128;
  int32_t pairs = 0;  // rotary_dim / 2
  int32_t interleaved = 0;
  float inv_freq[kMaxPairs] = {};
};

// False (nothing filled) when `r` is null or its fields are not a valid rotary setting for heads
// of head_dim: theta ≤ 0 or not finite, rotary_dim odd, negative or above head_dim or 256,
// factors negative or not finite, a Llama 3 factor without low < high frequency factors and a
// positive original length.
inline bool rope_table(const dscpp_rope* r, int64_t head_dim, RopeTable* out) {
  if (r == nullptr || out == nullptr || head_dim <= 0) return false;
  const int64_t dim = r->rotary_dim == 0 ? head_dim : r->rotary_dim;
  if (!(r->theta > 0.0f) || !std::isfinite(r->theta) || dim <= 0 || dim % 2 != 0 || dim > head_dim ||
      dim / 2 > RopeTable::kMaxPairs)
    return false;
  if (!(r->llama3_factor >= 0.0f) || !std::isfinite(r->llama3_factor) || !(r->linear_factor >= 0.0f) ||
      !std::isfinite(r->linear_factor))
    return false;
  const bool llama3 = r->llama3_factor > 0.0f;
  if (llama3 && !(r->low_freq_factor > 0.0f && r->high_freq_factor > r->low_freq_factor &&
                  r->original_max_position > 0.0f && std::isfinite(r->high_freq_factor) &&
                  std::isfinite(r->original_max_position)))
    return false;
  out->pairs = static_cast<int32_t>(dim / 2);
  out->interleaved = r->interleaved != 0;
  const float kTwoPi = 6.283185307179586f;
  for (int32_t i = 0; i < out->pairs; ++i) {
    // transformers: 1 / theta ** (arange(0, dim, 2).float() / dim), all in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    float f = 1.0f / std::pow(r->theta, exponent);
    if (llama3) {
      const float low_wavelen = r->original_max_position / r->low_freq_factor;
      const float high_wavelen = r->original_max_position / r->high_freq_factor;
      const float wavelen = kTwoPi / f;
      const float scaled = wavelen > low_wavelen ? f / r->llama3_factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float s = (r->original_max_position / wavelen - r->low_freq_factor) /
                        (r->high_freq_factor - r->low_freq_factor);
        f = (1.0f - s) * scaled / r->llama3_factor + s * scaled;
      } else {
        f = scaled;
      }
    }
    if (r->linear_factor > 0.0f) f = f / r->linear_factor;
    out->inv_freq[i] = f;
  }
  return true;
}

// The rope ops' shape rule, both tables': the rows and heads fit the row width, the first
// position is not negative, and `r` is a valid setting (rope_table fills `out`).
inline bool rope_args(int64_t batch, int64_t T, int64_t width, int64_t heads, int64_t head_dim, int64_t pos0,
                      const dscpp_rope* r, RopeTable* out) {
  return batch >= 0 && T >= 0 && heads >= 0 && head_dim > 0 && width >= heads * head_dim && pos0 >= 0 &&
         rope_table(r, head_dim, out);
}

// Columns (within a head) of pair i: rotate_half's (i, i + pairs) or the interleaved (2i, 2i + 1).
DSCPP_HD inline int32_t rope_first(const RopeTable& t, int32_t i) {
  return t.interleaved ? 2 * i : i;
}
DSCPP_HD inline int32_t rope_second(const RopeTable& t, int32_t i) {
  return t.interleaved ? 2 * i + 1 : i + t.pairs;
}

// The pair (a, b) rotated by +angle (forward) or −angle (backward, the transpose of the
// rotation): a' = a·cos − b·sin, b' = b·cos + a·sin.
DSCPP_HD inline void rope_rotate(float& a, float& b, float angle, bool backward) {
  const float c = cosf(angle), s = backward ? -sinf(angle) : sinf(angle);
  const float a0 = a, b0 = b;
  a = a0 * c - b0 * s;
  b = b0 * c + a0 * s;
}

// The angle of pair i at position `pos`: fp32 position × frequency, as transformers forms it.
DSCPP_HD inline float rope_angle(const RopeTable& t, int64_t pos, int32_t i) {
  return static_cast<float>(pos) * t.inv_freq[i];
}

}  // namespace dscpp::hd
