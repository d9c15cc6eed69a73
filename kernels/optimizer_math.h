// The per-element update rules of every optimizer dscpp implements, shared by the CPU loops
// (kernels/cpu/optim) and the CUDA kernels (kernels/cuda/optim.cu).
//
// Each rule is a template over the lane type T: `float` here and in CUDA, a SIMD wrapper in the
// CPU loops (which supplies operators and hd_fma / hd_sqrt / hd_sign_step overloads). All math
// is fp32. The per-step scalars (bias corrections, step sizes) are computed once per step on
// the host, in double, by the *_coeffs() builders and rounded to float once; no pow per
// element.
//
// The FMA sequences follow DeepSpeed's SIMD code (csrc/includes/cpu_adam.h and friends) where
// DeepSpeed has one, so a SIMD lane, the scalar tail and a CUDA thread round identically.
#pragma once

#include "kernels/hd.h"

#include <cmath>
#include <cstdint>

namespace dscpp::kernels {

using hd::hd_fma;
using hd::hd_sign_step;
using hd::hd_sqrt;

// ---- Adam / AdamW: DeepSpeed CPU Adam ---------------------------------------------------------
//   L2:        g = w·λ + g
//   m = fma(g, 1−β1, m·β1);  v = fma(g·g, 1−β2, v·β2)
//   d = fma(sqrt(v), 1/sqrt(bc2), ε)          (ε added after bias correction)
//   u = m / d
//   decoupled: w = fma(w, −lr·λ, w)            (pre-update w)
//   w = fma(u, −lr/bc1, w)
template <class T>
struct AdamCoeffs {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T bc2_rsqrt;   // 1/sqrt(1 − β2ᵗ), 1 without bias correction
  T step_size;   // −lr/(1 − β1ᵗ), −lr without bias correction
  T l2_decay;    // λ (used when l2)
  T decay_step;  // −lr·λ (used when decoupled)
  bool l2 = false, decoupled = false;

  template <class U>
  DSCPP_HD AdamCoeffs<U> as() const {
    return {U(beta1), U(one_minus_beta1), U(beta2), U(one_minus_beta2), U(eps), U(bc2_rsqrt),
            U(step_size), U(l2_decay), U(decay_step), l2, decoupled};
  }
};

template <class T>
DSCPP_HD inline void adam_update(T& w, T g, T& m, T& v, const AdamCoeffs<T>& c) {
  if (c.l2) g = hd_fma(w, c.l2_decay, g);
  m = hd_fma(g, c.one_minus_beta1, m * c.beta1);
  v = hd_fma(g * g, c.one_minus_beta2, v * c.beta2);
  T d = hd_fma(hd_sqrt(v), c.bc2_rsqrt, c.eps);
  T u = m / d;
  if (c.decoupled) w = hd_fma(w, c.decay_step, w);
  w = hd_fma(u, c.step_size, w);
}

// `step` is the step count after the increment (1 on the first update).
inline AdamCoeffs<float> adam_coeffs(double lr, double beta1, double beta2, double eps, double weight_decay,
                                     bool bias_correction, bool decoupled, int64_t step) {
  double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  AdamCoeffs<float> c{};
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.bc2_rsqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.step_size = static_cast<float>(-lr / bc1);
  c.l2_decay = static_cast<float>(weight_decay);
  c.decay_step = static_cast<float>(-lr * weight_decay);
  c.l2 = weight_decay > 0 && !decoupled;
  c.decoupled = weight_decay > 0 && decoupled;
  return c;
}

// ---- LAMB: DeepSpeed FusedLamb ----------------------------------------------------------------
// Pass 1 (lamb_moments): m, v updated; u = m/denom + λw with denom = sqrt(v)+ε, or sqrt(v+ε)
// with eps_inside_sqrt; the caller reduces Σw², Σu² per segment.
// Pass 2 (lamb_apply): ratio = ‖w‖/‖u‖ clamped to [min_coeff, max_coeff] (1 if either norm is
// 0); u recomputed from the stored m, v (bit-identical to pass 1); w = fma(u, −step·ratio, w)
// with step = lr·sqrt(1−β2ᵗ)/(1−β1ᵗ) (lr without bias correction).
template <class T>
struct LambCoeffs {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  bool eps_inside_sqrt = false;

  template <class U>
  DSCPP_HD LambCoeffs<U> as() const {
    return {U(beta1), U(one_minus_beta1), U(beta2), U(one_minus_beta2), U(eps), U(weight_decay), eps_inside_sqrt};
  }
};

template <class T>
DSCPP_HD inline T lamb_direction(T w, T m, T v, const LambCoeffs<T>& c) {
  T denom = c.eps_inside_sqrt ? hd_sqrt(v + c.eps) : hd_sqrt(v) + c.eps;
  return hd_fma(c.weight_decay, w, m / denom);
}

template <class T>
DSCPP_HD inline T lamb_moments(T w, T g, T& m, T& v, const LambCoeffs<T>& c) {
  m = hd_fma(g, c.one_minus_beta1, m * c.beta1);
  v = hd_fma(g * g, c.one_minus_beta2, v * c.beta2);
  return lamb_direction(w, m, v, c);
}

template <class T>
DSCPP_HD inline void lamb_apply(T& w, T m, T v, T neg_step, const LambCoeffs<T>& c) {
  w = hd_fma(lamb_direction(w, m, v, c), neg_step, w);
}

inline LambCoeffs<float> lamb_coeffs(double beta1, double beta2, double eps, double weight_decay,
                                     bool eps_inside_sqrt) {
  return {static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(eps),
          static_cast<float>(weight_decay),
          eps_inside_sqrt};
}

// lr·sqrt(1−β2ᵗ)/(1−β1ᵗ), or lr without bias correction.
inline double lamb_step_size(double lr, double beta1, double beta2, bool bias_correction, int64_t step) {
  if (!bias_correction) return lr;
  double t = static_cast<double>(step);
  return lr * std::sqrt(1.0 - std::pow(beta2, t)) / (1.0 - std::pow(beta1, t));
}

// ‖w‖/‖u‖ clamped to [min_coeff, max_coeff]; 1 when either norm is 0.
DSCPP_HD inline double lamb_trust_ratio(double w_norm, double u_norm, double min_coeff, double max_coeff) {
  if (w_norm == 0.0 || u_norm == 0.0) return 1.0;
  double r = w_norm / u_norm;
  return r > max_coeff ? max_coeff : (r < min_coeff ? min_coeff : r);
}

// ---- SGD: torch.optim.SGD ----------------------------------------------------------------
//   maximize: g = −g;  weight decay (L2): g = fma(w, λ, g)
//   momentum: buf = g on the buffer's first step, else fma(g, 1−dampening, buf·μ)
//             g = nesterov ? fma(buf, μ, g) : buf
//   w = fma(g, −lr, w)
template <class T>
struct SgdCoeffs {
  T weight_decay, momentum, one_minus_dampening, neg_lr;
  bool maximize = false, has_decay = false, has_momentum = false, first_step = false, nesterov = false;

  template <class U>
  DSCPP_HD SgdCoeffs<U> as() const {
    return {U(weight_decay), U(momentum), U(one_minus_dampening), U(neg_lr),
            maximize, has_decay, has_momentum, first_step, nesterov};
  }
};

template <class T>
DSCPP_HD inline void sgd_update(T& w, T g, T& buf, const SgdCoeffs<T>& c) {
  if (c.maximize) g = -g;
  if (c.has_decay) g = hd_fma(w, c.weight_decay, g);
  if (c.has_momentum) {
    buf = c.first_step ? g : hd_fma(g, c.one_minus_dampening, buf * c.momentum);
    g = c.nesterov ? hd_fma(buf, c.momentum, g) : buf;
  }
  w = hd_fma(g, c.neg_lr, w);
}

inline SgdCoeffs<float> sgd_coeffs(double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                                   bool maximize, bool first_momentum_step) {
  SgdCoeffs<float> c{};
  c.weight_decay = static_cast<float>(weight_decay);
  c.momentum = static_cast<float>(momentum);
  c.one_minus_dampening = static_cast<float>(1.0 - dampening);
  c.neg_lr = static_cast<float>(-lr);
  c.maximize = maximize;
  c.has_decay = weight_decay != 0;
  c.has_momentum = momentum != 0;
  c.first_step = first_momentum_step;
  c.nesterov = nesterov;
  return c;
}

// ---- Adagrad: torch.optim.Adagrad --------------------------------------------------------
//   maximize: g = −g;  weight decay (L2): g = fma(w, λ, g)
//   sum = fma(g, g, sum);  w = fma(g / (sqrt(sum) + ε), −clr, w),  clr = lr/(1 + (t−1)·lr_decay)
template <class T>
struct AdagradCoeffs {
  T weight_decay, eps, neg_clr;
  bool maximize = false, has_decay = false;

  template <class U>
  DSCPP_HD AdagradCoeffs<U> as() const {
    return {U(weight_decay), U(eps), U(neg_clr), maximize, has_decay};
  }
};

template <class T>
DSCPP_HD inline void adagrad_update(T& w, T g, T& sum, const AdagradCoeffs<T>& c) {
  if (c.maximize) g = -g;
  if (c.has_decay) g = hd_fma(w, c.weight_decay, g);
  sum = hd_fma(g, g, sum);
  w = hd_fma(g / (hd_sqrt(sum) + c.eps), c.neg_clr, w);
}

inline AdagradCoeffs<float> adagrad_coeffs(double lr, double lr_decay, double eps, double weight_decay, bool maximize,
                                           int64_t step) {
  AdagradCoeffs<float> c{};
  c.weight_decay = static_cast<float>(weight_decay);
  c.eps = static_cast<float>(eps);
  c.neg_clr = static_cast<float>(-lr / (1.0 + static_cast<double>(step - 1) * lr_decay));
  c.maximize = maximize;
  c.has_decay = weight_decay != 0;
  return c;
}

// ---- Lion: DeepSpeed (csrc/lion) -----------------------------------------------------------
//   w = w·(1 − lr·λ);  c = fma(g, 1−β1, m·β1);  w = w + (−lr)·sign(c);  m = fma(g, 1−β2, m·β2)
template <class T>
struct LionCoeffs {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, neg_lr, decay_factor;
  bool has_decay = false;

  template <class U>
  DSCPP_HD LionCoeffs<U> as() const {
    return {U(beta1), U(one_minus_beta1), U(beta2), U(one_minus_beta2), U(neg_lr), U(decay_factor), has_decay};
  }
};

template <class T>
DSCPP_HD inline void lion_update(T& w, T g, T& m, const LionCoeffs<T>& c) {
  if (c.has_decay) w = w * c.decay_factor;
  T interp = hd_fma(g, c.one_minus_beta1, m * c.beta1);
  w = w + hd_sign_step(interp, c.neg_lr);
  m = hd_fma(g, c.one_minus_beta2, m * c.beta2);
}

inline LionCoeffs<float> lion_coeffs(double lr, double beta1, double beta2, double weight_decay) {
  LionCoeffs<float> c{};
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.neg_lr = static_cast<float>(-lr);
  c.decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  c.has_decay = weight_decay != 0;
  return c;
}

}  // namespace dscpp::kernels
