// The optimizer tests' references and harness (test_optimizers.cpp: the update rules;
// test_optimizer_state.cpp: threads, SIMD levels, state, errors). The published rules are
// written out here in double, independently of kernels/optimizer_math.h:
//   Adam/AdamW  DeepSpeed CPU Adam (csrc/adam/cpu_adam_impl.cpp)
//   Lamb        DeepSpeed FusedLamb (csrc/lamb/fused_lamb_cuda_kernel.cu)
//   SGD         torch.optim.SGD (torch/optim/sgd.py)
//   Adagrad     torch.optim.Adagrad (torch/optim/adagrad.py)
//   Lion        DeepSpeed CPU Lion (csrc/lion/cpu_lion_impl.cpp)
//
// Tolerance: the optimizers compute in fp32 and the references in double from the same fp32
// inputs. One step costs ~10 fp32 roundings per element (each ≤ 2⁻²⁴ ≈ 6e-8 relative), the
// rules are well conditioned for the data used (Adam's m/d with |g| well above ε, LAMB's
// ratios away from the clamps' edges, Lion's interpolation bounded away from 0), and errors
// carry over steps with a factor of about 1; over ≤ 6 steps the worst case stays under ~4e-6
// relative to the largest value of the array compared, so the tests use 5e-6 of it. The
// hyperparameters are large enough (lr 0.05–0.1, ε comparable to sqrt(v), λ 0.1) that each term
#pragma once

#include "configs/ds_config.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "kernels/cpu/optim/optim_cpu.h"
#include "runtime/optim/optimizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace optim_test {

using dscpp::runtime::Segment;
using dscpp::runtime::StepOverrides;
using Kind = dscpp::config::OptimizerKind;
using Vec = std::vector<double>;


constexpr double kTol = 5e-6;
inline const std::vector<int64_t> kSizes = {1, 7, 17, 1000, 4099};

inline dscpp::config::OptimizerConfig make_config(Kind kind, const std::string& type,
                                           std::function<void(dscpp::config::OptimizerParams&)> set = {}) {
  dscpp::config::OptimizerConfig c;
  c.type = type;
  c.kind = kind;
  if (set) set(c.params);
  return c;
}

// ---- reference rules (double) ------------------------------------------------------------
struct Ref {
  std::map<std::string, Vec> state;
  // (state, w, g, step t (1-based), lr, momentum/beta1 for this step)
  std::function<void(std::map<std::string, Vec>&, Vec&, const std::vector<float>&, int64_t, double, double)> step;
};

inline Ref adam_ref(int64_t n, double b2, double eps, double wd, bool bias_correction, bool adamw) {
  Ref r;
  r.state = {{"exp_avg", Vec(n, 0.0)}, {"exp_avg_sq", Vec(n, 0.0)}};
  r.step = [=](auto& s, Vec& w, const std::vector<float>& g, int64_t t, double lr, double b1) {
    Vec& m = s["exp_avg"];
    Vec& v = s["exp_avg_sq"];
    double bc1 = bias_correction ? 1 - std::pow(b1, double(t)) : 1.0;
    double bc2 = bias_correction ? 1 - std::pow(b2, double(t)) : 1.0;
    for (int64_t i = 0; i < n; ++i) {
      double gi = g[i];
      if (!adamw && wd > 0) gi += wd * w[i];  // L2
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;  // ε after bias correction
      if (adamw && wd > 0) w[i] -= lr * wd * w[i];            // decoupled, pre-update w
      w[i] -= lr / bc1 * (m[i] / denom);
    }
  };
  return r;
}

inline Ref lamb_ref(std::vector<int64_t> bounds, double b2, double eps, double wd, bool bias_correction,
                    bool eps_inside, double min_coeff, double max_coeff,
                    std::vector<std::vector<double>>* ratios_out = nullptr) {
  int64_t n = bounds.back();
  Ref r;
  r.state = {{"exp_avg", Vec(n, 0.0)}, {"exp_avg_sq", Vec(n, 0.0)}};
  r.step = [=](auto& s, Vec& w, const std::vector<float>& g, int64_t t, double lr, double b1) {
    Vec& m = s["exp_avg"];
    Vec& v = s["exp_avg_sq"];
    double step_size =
        bias_correction ? lr * std::sqrt(1 - std::pow(b2, double(t))) / (1 - std::pow(b1, double(t))) : lr;
    if (ratios_out) ratios_out->emplace_back();
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      Vec u;
      double ww = 0, uu = 0;
      for (int64_t i = bounds[k]; i < bounds[k + 1]; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
        double denom = eps_inside ? std::sqrt(v[i] + eps) : std::sqrt(v[i]) + eps;
        u.push_back(m[i] / denom + wd * w[i]);
        ww += w[i] * w[i];
        uu += u.back() * u.back();
      }
      double ratio = 1.0;
      if (ww != 0 && uu != 0) ratio = std::clamp(std::sqrt(ww) / std::sqrt(uu), min_coeff, max_coeff);
      if (ratios_out) ratios_out->back().push_back(ratio);
      for (int64_t i = bounds[k]; i < bounds[k + 1]; ++i) w[i] -= step_size * ratio * u[i - bounds[k]];
    }
  };
  return r;
}

// torch.optim.SGD. `dampening` etc. fixed; momentum per step.
inline Ref sgd_ref(int64_t n, double dampening, double wd, bool nesterov, bool maximize) {
  Ref r;
  r.state = {{"momentum_buffer", Vec(n, 0.0)}};
  auto started = std::make_shared<bool>(false);
  r.step = [=](auto& s, Vec& w, const std::vector<float>& g, int64_t, double lr, double mu) {
    Vec& buf = s["momentum_buffer"];
    for (int64_t i = 0; i < n; ++i) {
      double d = maximize ? -double(g[i]) : double(g[i]);
      if (wd != 0) d += wd * w[i];
      if (mu != 0) {
        buf[i] = *started ? mu * buf[i] + (1 - dampening) * d : d;
        d = nesterov ? d + mu * buf[i] : buf[i];
      }
      w[i] -= lr * d;
    }
    if (mu != 0) *started = true;
  };
  return r;
}

inline Ref adagrad_ref(int64_t n, double lr_decay, double init_acc, double eps, double wd) {
  Ref r;
  r.state = {{"sum", Vec(n, init_acc)}};
  r.step = [=](auto& s, Vec& w, const std::vector<float>& g, int64_t t, double lr, double) {
    Vec& sum = s["sum"];
    double clr = lr / (1 + double(t - 1) * lr_decay);
    for (int64_t i = 0; i < n; ++i) {
      double d = g[i];
      if (wd != 0) d += wd * w[i];
      sum[i] += d * d;
      w[i] -= clr * d / (std::sqrt(sum[i]) + eps);
    }
  };
  return r;
}

inline Ref lion_ref(int64_t n, double b2, double wd) {
  Ref r;
  r.state = {{"exp_avg", Vec(n, 0.0)}};
  r.step = [=](auto& s, Vec& w, const std::vector<float>& g, int64_t, double lr, double b1) {
    Vec& m = s["exp_avg"];
    for (int64_t i = 0; i < n; ++i) {
      if (wd != 0) w[i] *= 1 - lr * wd;
      double c = b1 * m[i] + (1 - b1) * g[i];
      w[i] -= lr * (c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0));
      m[i] = b2 * m[i] + (1 - b2) * g[i];
    }
  };
  return r;
}

// ---- data ----------------------------------------------------------------------------------
inline std::vector<float> uniform(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> out(n);
  for (auto& x : out) x = d(rng);
  return out;
}

// ---- harness -----------------------------------------------------------------------------
struct Run {
  dscpp::config::OptimizerConfig config;
  int64_t n = 0;
  int steps = 4;
  std::vector<Segment> segments;
  std::function<std::vector<float>(int64_t)> init = [](int64_t n) { return uniform(n, 7, -1.f, 1.f); };
  std::function<std::vector<float>(int64_t, int)> grad = [](int64_t n, int t) {
    return uniform(n, 100 + t, -1.f, 1.f);
  };
  std::function<StepOverrides(int)> overrides = [](int) { return StepOverrides{}; };
  // Ranges whose values differ in magnitude are compared each against its own largest value
  // (empty: the whole array is one range).
  std::vector<int64_t> blocks;
};

inline void require_close(const std::vector<float>& got, const Vec& want, const std::string& what,
                   std::vector<int64_t> blocks) {
  REQUIRE(got.size() == want.size());
  if (blocks.empty()) blocks = {0, int64_t(got.size())};
  for (size_t b = 0; b + 1 < blocks.size(); ++b) {
    double scale = 1e-30;
    for (int64_t i = blocks[b]; i < blocks[b + 1]; ++i) scale = std::max(scale, std::abs(want[i]));
    for (int64_t i = blocks[b]; i < blocks[b + 1]; ++i) {
      if (!(std::abs(double(got[i]) - want[i]) <= kTol * scale)) {
        INFO(what << "[" << i << "] = " << got[i] << ", reference " << want[i] << " (scale " << scale << ")");
        REQUIRE(std::abs(double(got[i]) - want[i]) <= kTol * scale);
      }
    }
  }
}

// Runs the optimizer and the reference side by side, comparing weights and state every step.
// Returns the final weights.
inline std::vector<float> check_run(const Run& run, Ref ref) {
  auto device = dscpp::make_cpu_device();
  auto opt = dscpp::runtime::make_optimizer(run.config, *device);
  int group = opt->add_group(run.n, run.segments);
  std::vector<float> w = run.init(run.n);
  Vec wr(w.begin(), w.end());
  for (int t = 1; t <= run.steps; ++t) {
    std::vector<float> g = run.grad(run.n, t);
    StepOverrides ov = run.overrides(t);
    opt->step(group, w.data(), g.data(), ov);
    ref.step(ref.state, wr, g, t, ov.lr.value_or(opt->base_lr()), ov.momentum.value_or(opt->base_momentum()));
    REQUIRE(opt->step_count(group) == t);
    std::string where = opt->name() + " n=" + std::to_string(run.n) + " step " + std::to_string(t);
    require_close(w, wr, where + " w", run.blocks);
    for (const auto& st : opt->state(group)) {
      REQUIRE(ref.state.count(st.name) == 1);
      REQUIRE(st.numel == run.n);
      require_close(std::vector<float>(st.data, st.data + st.numel), ref.state[st.name], where + " " + st.name,
                    run.blocks);
    }
  }
  return w;
}

// Restore the automatic SIMD level and the thread count even when a REQUIRE fails.
struct Restore {
  std::string level = dscpp::kernels::cpu::optimizer_simd_level();
  int threads = dscpp::num_threads();
  ~Restore() {
    dscpp::kernels::cpu::set_optimizer_simd_level(level);
    dscpp::set_num_threads(threads);
  }
};

// Every SIMD level the CPU has, one Catch section each.
template <class F>
void for_each_level(F&& f) {
  Restore restore;
  for (const std::string& level : dscpp::kernels::cpu::optimizer_simd_levels()) {
    SECTION("simd " + level) {
      dscpp::kernels::cpu::set_optimizer_simd_level(level);
      f(level);
    }
  }
}

}  // namespace optim_test
