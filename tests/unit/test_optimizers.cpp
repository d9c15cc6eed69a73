// Optimizers against the published update rules, written out here in double independently of
// kernels/optimizer_math.h:
//   Adam/AdamW  DeepSpeed CPU Adam (csrc/adam/cpu_adam_impl.cpp; engine.md 5.1)
//   Lamb        DeepSpeed FusedLamb (csrc/lamb/fused_lamb_cuda_kernel.cu; engine.md §10)
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
// of a rule moves the result by far more than the tolerance.
#include <catch2/catch.hpp>

#include "configs/ds_config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/optim/optim_cpu.h"
#include "runtime/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

using dscpp::runtime::Segment;
using dscpp::runtime::StepOverrides;
using Kind = dscpp::config::OptimizerKind;
using Vec = std::vector<double>;

namespace {

constexpr double kTol = 5e-6;
const std::vector<int64_t> kSizes = {1, 7, 17, 1000, 4099};

dscpp::config::OptimizerConfig make_config(Kind kind, const std::string& type,
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

Ref adam_ref(int64_t n, double b2, double eps, double wd, bool bias_correction, bool adamw) {
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

Ref lamb_ref(std::vector<int64_t> bounds, double b2, double eps, double wd, bool bias_correction, bool eps_inside,
             double min_coeff, double max_coeff,
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
Ref sgd_ref(int64_t n, double dampening, double wd, bool nesterov, bool maximize) {
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

Ref adagrad_ref(int64_t n, double lr_decay, double init_acc, double eps, double wd) {
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

Ref lion_ref(int64_t n, double b2, double wd) {
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
std::vector<float> uniform(int64_t n, uint32_t seed, float lo, float hi) {
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

void require_close(const std::vector<float>& got, const Vec& want, const std::string& what,
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
std::vector<float> check_run(const Run& run, Ref ref) {
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

}  // namespace

TEST_CASE("SIMD level is chosen once and reported", "[optimizers]") {
  auto levels = dscpp::kernels::cpu::optimizer_simd_levels();
  REQUIRE(!levels.empty());
  REQUIRE(levels.back() == "scalar");
  std::string level = dscpp::kernels::cpu::optimizer_simd_level();
  REQUIRE(std::find(levels.begin(), levels.end(), level) != levels.end());
  REQUIRE_THROWS_AS(dscpp::kernels::cpu::set_optimizer_simd_level("sse9"), dscpp::Error);
}

TEST_CASE("Adam/AdamW follow DeepSpeed's CPU Adam", "[optimizers]") {
  for_each_level([](const std::string&) {
    for (int64_t n : kSizes) {
      // AdamW (type AdamW), decay on, bias correction on.
      Run r;
      r.n = n;
      r.config = make_config(Kind::adamw, "AdamW", [](auto& p) {
        p.lr = 0.1, p.betas = {0.8, 0.95}, p.eps = 1e-2, p.weight_decay = 0.1;
      });
      check_run(r, adam_ref(n, 0.95, 1e-2, 0.1, true, true));
      // Adam with adam_w_mode (DeepSpeed's default): decoupled; no bias correction.
      r.config = make_config(Kind::adam, "adam", [](auto& p) {
        p.lr = 0.05, p.betas = {0.9, 0.99}, p.eps = 1e-3, p.weight_decay = 0.1, p.bias_correction = false;
      });
      check_run(r, adam_ref(n, 0.99, 1e-3, 0.1, false, true));
      // Adam with adam_w_mode false: L2 (g += λw).
      r.config = make_config(Kind::adam, "Adam", [](auto& p) {
        p.lr = 0.1, p.betas = {0.8, 0.95}, p.eps = 1e-2, p.weight_decay = 0.1, p.adam_w_mode = false;
      });
      check_run(r, adam_ref(n, 0.95, 1e-2, 0.1, true, false));
      // No weight decay.
      r.config = make_config(Kind::adam, "Adam", [](auto& p) { p.lr = 0.1, p.betas = {0.8, 0.95}, p.eps = 1e-2; });
      r.steps = 6;
      check_run(r, adam_ref(n, 0.95, 1e-2, 0.0, true, true));
    }
  });
}

TEST_CASE("Adam: L2 and decoupled decay differ; both equal without decay", "[optimizers]") {
  auto run = [](bool adam_w_mode, double wd) {
    Run r;
    r.n = 100;
    r.config = make_config(Kind::adam, "Adam", [&](auto& p) {
      p.lr = 0.1, p.eps = 1e-2, p.weight_decay = wd, p.adam_w_mode = adam_w_mode;
    });
    return check_run(r, adam_ref(100, 0.999, 1e-2, wd, true, adam_w_mode));
  };
  REQUIRE(run(true, 0.0) == run(false, 0.0));
  REQUIRE(run(true, 0.1) != run(false, 0.1));
}

TEST_CASE("Scheduler overrides replace lr and beta1 / momentum for a step", "[optimizers]") {
  auto overrides = [](int t) {
    StepOverrides o;
    if (t >= 2) o.lr = 0.02 * t;
    if (t >= 3) o.momentum = 0.85 + 0.01 * t;
    return o;
  };
  for (int64_t n : {int64_t(17), int64_t(1000)}) {
    Run r;
    r.n = n;
    r.steps = 5;
    r.overrides = overrides;
    r.config = make_config(Kind::adamw, "AdamW", [](auto& p) {
      p.lr = 0.1, p.betas = {0.8, 0.95}, p.eps = 1e-2, p.weight_decay = 0.1;
    });
    check_run(r, adam_ref(n, 0.95, 1e-2, 0.1, true, true));
    r.config = make_config(Kind::lamb, "Lamb", [](auto& p) { p.lr = 0.1, p.betas = {0.8, 0.95}, p.eps = 1e-2; });
    check_run(r, lamb_ref({0, n}, 0.95, 1e-2, 0.0, true, false, 0.01, 10.0));
    r.config = make_config(Kind::sgd, "SGD", [](auto& p) { p.lr = 0.1, p.momentum = 0.9, p.dampening = 0.1; });
    check_run(r, sgd_ref(n, 0.1, 0.0, false, false));
    r.config = make_config(Kind::lion, "Lion", [](auto& p) { p.lr = 0.01, p.betas = {0.8, 0.95}; });
    r.grad = [](int64_t n, int t) {  // |g| ≥ 0.1 with a fixed sign per element: sign(c) is unambiguous
      auto mag = uniform(n, 200 + t, 0.1f, 1.f);
      for (int64_t i = 0; i < n; ++i) mag[i] *= (i % 3 == 0) ? -1.f : 1.f;
      return mag;
    };
    check_run(r, lion_ref(n, 0.95, 0.0));
  }
}

TEST_CASE("Lamb follows DeepSpeed's FusedLamb, per segment", "[optimizers]") {
  for_each_level([](const std::string&) {
    for (int64_t n : kSizes) {
      for (bool eps_inside : {false, true}) {
        for (bool bc : {true, false}) {
          for (double wd : {0.0, 0.1}) {
            Run r;
            r.n = n;
            r.config = make_config(Kind::lamb, "Lamb", [&](auto& p) {
              p.lr = 0.05, p.betas = {0.8, 0.95}, p.eps = 1e-2, p.weight_decay = wd, p.bias_correction = bc;
              p.eps_inside_sqrt = eps_inside;
            });
            check_run(r, lamb_ref({0, n}, 0.95, 1e-2, wd, bc, eps_inside, 0.01, 10.0));
          }
        }
      }
    }
  });
}

TEST_CASE("Lamb trust ratio: clamps at both ends, 1 for a zero norm, per segment", "[optimizers]") {
  // Four parameter tensors in one group, plus a gap (an uncovered range is its own segment):
  //   [0, 300)     w ~ U(-1, 1): ratio ‖w‖/‖u‖ inside [0.01, 10]
  //   [300, 700)   w ~ 100·U: ratio > 10, clamped to max_coeff
  //   [700, 1200)  w ~ 1e-5·U: ratio < 0.01, clamped to min_coeff
  //   [1200, 1333) w = 0: ‖w‖ = 0, ratio 1
  //   [1333, 1400) gap, g = 0 and no decay: ‖u‖ = 0, ratio 1
  //   [1400, 1517) w ~ U
  const std::vector<int64_t> bounds = {0, 300, 700, 1200, 1333, 1400, 1517};
  std::vector<Segment> segs = {{0, 300}, {300, 400}, {700, 500}, {1200, 133}, {1400, 117}};
  Restore restore;
  for (int threads : {1, 2, 3}) {
    dscpp::set_num_threads(threads);
    std::vector<std::vector<double>> ratios;  // per step, per segment
    Run r;
    r.n = 1517;
    r.segments = segs;
    r.blocks = bounds;
    r.config = make_config(Kind::lamb, "Lamb", [](auto& p) { p.lr = 0.05, p.betas = {0.8, 0.95}, p.eps = 1e-2; });
    r.init = [](int64_t n) {
      auto w = uniform(n, 9, -1.f, 1.f);
      for (int64_t i = 300; i < 700; ++i) w[i] *= 100.f;
      for (int64_t i = 700; i < 1200; ++i) w[i] *= 1e-5f;
      for (int64_t i = 1200; i < 1333; ++i) w[i] = 0.f;
      return w;
    };
    r.grad = [](int64_t n, int t) {
      auto g = uniform(n, 300 + t, -1.f, 1.f);
      for (int64_t i = 1333; i < 1400; ++i) g[i] = 0.f;
      return g;
    };
    check_run(r, lamb_ref(bounds, 0.95, 1e-2, 0.0, true, false, 0.01, 10.0, &ratios));
    REQUIRE(ratios.size() == size_t(r.steps));
    for (size_t t = 0; t < ratios.size(); ++t) {
      REQUIRE(ratios[t].size() == 6);
      CHECK(ratios[t][0] > 0.01);
      CHECK(ratios[t][0] < 10);
      CHECK(ratios[t][1] == 10.0);
      CHECK(ratios[t][2] == 0.01);
      if (t == 0) CHECK(ratios[t][3] == 1.0);  // ‖w‖ = 0 before the first update only
      CHECK(ratios[t][4] == 1.0);
    }

    // The kernel reports the same ratios.
    std::vector<float> w = r.init(1517), g = r.grad(1517, 1), m(1517, 0.f), v(1517, 0.f);
    std::vector<double> got;
    auto c = dscpp::kernels::lamb_coeffs(0.8, 0.95, 1e-2, 0.0, false);
    dscpp::kernels::cpu::lamb_step(w.data(), g.data(), m.data(), v.data(), bounds, c, 0.05, 0.01, 10.0, &got);
    REQUIRE(got.size() == 6);
    CHECK(got[1] == 10.0);
    CHECK(got[2] == 0.01);
    CHECK(got[3] == 1.0);
    CHECK(got[4] == 1.0);
  }
}

TEST_CASE("SGD follows torch.optim.SGD", "[optimizers]") {
  for_each_level([](const std::string&) {
    for (int64_t n : kSizes) {
      struct C {
        double mom, damp, wd;
        bool nesterov, maximize;
      };
      for (C c : {C{0.0, 0.0, 0.0, false, false}, C{0.0, 0.0, 0.1, false, true}, C{0.9, 0.0, 0.0, false, false},
                  C{0.9, 0.3, 0.1, false, false}, C{0.9, 0.0, 0.1, true, false}, C{0.8, 0.0, 0.0, true, true}}) {
        Run r;
        r.n = n;
        r.config = make_config(Kind::sgd, "SGD", [&](auto& p) {
          p.lr = 0.1, p.momentum = c.mom, p.dampening = c.damp, p.weight_decay = c.wd, p.nesterov = c.nesterov;
          p.maximize = c.maximize;
        });
        Ref ref = sgd_ref(n, c.damp, c.wd, c.nesterov, c.maximize);
        if (c.mom == 0) ref.state.clear();  // torch keeps no buffer without momentum
        check_run(r, ref);
      }
    }
  });
}

TEST_CASE("SGD: a momentum override on a momentum-free SGD starts the buffer with g", "[optimizers]") {
  Run r;
  r.n = 33;
  r.steps = 4;
  r.config = make_config(Kind::sgd, "SGD", [](auto& p) { p.lr = 0.1; });
  r.overrides = [](int t) {
    StepOverrides o;
    if (t >= 3) o.momentum = 0.9;
    return o;
  };
  auto device = dscpp::make_cpu_device();
  auto opt = dscpp::runtime::make_optimizer(r.config, *device);
  int g0 = opt->add_group(r.n, {});
  REQUIRE(opt->state(g0).empty());
  // (the reference's buffer starts on the first step with momentum, like torch's buf = None)
  check_run(r, sgd_ref(r.n, 0.0, 0.0, false, false));
}

TEST_CASE("Adagrad follows torch.optim.Adagrad", "[optimizers]") {
  for_each_level([](const std::string&) {
    for (int64_t n : kSizes) {
      for (double lr_decay : {0.0, 0.1}) {
        for (double wd : {0.0, 0.1}) {
          for (double init : {0.0, 0.1}) {
            Run r;
            r.n = n;
            r.config = make_config(Kind::adagrad, "Adagrad", [&](auto& p) {
              p.lr = 0.1, p.eps = 1e-10, p.lr_decay = lr_decay, p.weight_decay = wd;
              p.initial_accumulator_value = init;
            });
            check_run(r, adagrad_ref(n, lr_decay, init, 1e-10, wd));
          }
        }
      }
    }
  });
}

TEST_CASE("Lion follows DeepSpeed's Lion, sign(0) = 0", "[optimizers]") {
  for_each_level([](const std::string&) {
    for (int64_t n : kSizes) {
      for (double wd : {0.0, 0.1}) {
        Run r;
        r.n = n;
        r.config = make_config(Kind::lion, "Lion", [&](auto& p) {
          p.lr = 0.01, p.betas = {0.9, 0.99}, p.weight_decay = wd;
        });
        // |g| ≥ 0.1 with a fixed sign per element keeps the interpolation c away from 0 (no
        // fp32-vs-double sign flips); every 5th element gets g = 0 always, so c = 0 exactly
        // and only the decay moves it.
        r.grad = [](int64_t n, int t) {
          auto g = uniform(n, 400 + t, 0.1f, 1.f);
          for (int64_t i = 0; i < n; ++i) g[i] = (i % 5 == 0) ? 0.f : ((i % 2) ? -g[i] : g[i]);
          return g;
        };
        auto w0 = r.init(n);
        auto w = check_run(r, lion_ref(n, 0.99, wd));
        double decay = std::pow(1 - 0.01 * wd, r.steps);
        CHECK(w[0] == Approx(w0[0] * decay).epsilon(1e-6));
      }
    }
  });
}

TEST_CASE("Threads and SIMD levels give bit-identical results", "[optimizers]") {
  const int64_t n = 50003;  // > 2 chunks of the pool's grain, odd tail
  auto w0 = uniform(n, 11, -1.f, 1.f);
  std::vector<dscpp::config::OptimizerConfig> configs = {
      make_config(Kind::adamw, "AdamW", [](auto& p) { p.lr = 0.1, p.eps = 1e-2, p.weight_decay = 0.1; }),
      make_config(Kind::adam, "Adam", [](auto& p) { p.lr = 0.1, p.weight_decay = 0.1, p.adam_w_mode = false; }),
      make_config(Kind::sgd, "SGD", [](auto& p) { p.lr = 0.1, p.momentum = 0.9, p.nesterov = true; }),
      make_config(Kind::adagrad, "Adagrad", [](auto& p) { p.lr = 0.1, p.eps = 1e-10, p.lr_decay = 0.1; }),
      make_config(Kind::lion, "Lion", [](auto& p) { p.lr = 0.01, p.weight_decay = 0.1; }),
      make_config(Kind::lamb, "Lamb", [](auto& p) { p.lr = 0.05, p.weight_decay = 0.1; }),
  };
  Restore restore;
  for (const auto& config : configs) {
    std::vector<float> first;
    std::string first_what;
    for (const std::string& level : dscpp::kernels::cpu::optimizer_simd_levels()) {
      dscpp::kernels::cpu::set_optimizer_simd_level(level);
      for (int threads : {1, 2, 3}) {
        dscpp::set_num_threads(threads);
        auto device = dscpp::make_cpu_device();
        auto opt = dscpp::runtime::make_optimizer(config, *device);
        int group = opt->add_group(n, {{0, 20000}, {20000, n - 20000}});
        std::vector<float> w = w0;
        for (int t = 1; t <= 3; ++t) {
          auto g = uniform(n, 500 + t, -1.f, 1.f);
          opt->step(group, w.data(), g.data(), {});
        }
        std::string what = config.type + " " + level + " threads " + std::to_string(threads);
        if (first.empty()) {
          first = w;
          first_what = what;
          continue;
        }
        INFO(what << " vs " << first_what);
        if (config.kind == Kind::lamb) {  // the norms' summation order follows the vector width
          for (int64_t i = 0; i < n; ++i) REQUIRE(w[i] == Approx(first[i]).epsilon(1e-6).margin(1e-7));
        } else {
          REQUIRE(std::memcmp(w.data(), first.data(), n * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("Reference agreement with several threads on a large group", "[optimizers]") {
  Restore restore;
  for (int threads : {2, 3}) {
    dscpp::set_num_threads(threads);
    Run r;
    r.n = 70001;
    r.steps = 3;
    r.segments = {{0, 30011}, {30011, 39990}};
    r.config = make_config(Kind::adamw, "AdamW", [](auto& p) { p.lr = 0.1, p.eps = 1e-2, p.weight_decay = 0.1; });
    check_run(r, adam_ref(r.n, 0.999, 1e-2, 0.1, true, true));
    r.config = make_config(Kind::lamb, "Lamb", [](auto& p) { p.lr = 0.05, p.eps = 1e-2, p.weight_decay = 0.1; });
    check_run(r, lamb_ref({0, 30011, 70001}, 0.999, 1e-2, 0.1, true, false, 0.01, 10.0));
  }
}

TEST_CASE("State tensors, step counts and memory accounting", "[optimizers]") {
  auto device = dscpp::make_cpu_device();
  struct Expect {
    dscpp::config::OptimizerConfig config;
    std::string name;
    std::vector<std::string> states;
    double momentum;
  };
  std::vector<Expect> cases = {
      {make_config(Kind::adam, "Adam"), "adamw", {"exp_avg", "exp_avg_sq"}, 0.9},
      {make_config(Kind::adam, "Adam", [](auto& p) { p.adam_w_mode = false; }), "adam", {"exp_avg", "exp_avg_sq"}, 0.9},
      {make_config(Kind::adamw, "AdamW"), "adamw", {"exp_avg", "exp_avg_sq"}, 0.9},
      {make_config(Kind::lamb, "Lamb"), "lamb", {"exp_avg", "exp_avg_sq"}, 0.9},
      {make_config(Kind::sgd, "SGD", [](auto& p) { p.momentum = 0.5; }), "sgd", {"momentum_buffer"}, 0.5},
      {make_config(Kind::adagrad, "Adagrad"), "adagrad", {"sum"}, 0.0},
      {make_config(Kind::lion, "Lion"), "lion", {"exp_avg"}, 0.9},
  };
  for (const auto& c : cases) {
    auto before = device->stats().current[size_t(dscpp::MemCategory::optimizer_state)];
    {
      auto opt = dscpp::runtime::make_optimizer(c.config, *device);
      REQUIRE(opt->name() == c.name);
      REQUIRE(opt->base_lr() == 1e-3);
      REQUIRE(opt->base_momentum() == c.momentum);
      REQUIRE(opt->add_group(10, {}) == 0);
      REQUIRE(opt->add_group(0, {}) == 1);  // empty partitions are legal
      REQUIRE(opt->add_group(5, {{0, 5}}) == 2);
      auto st = opt->state(0);
      REQUIRE(st.size() == c.states.size());
      for (size_t i = 0; i < st.size(); ++i) {
        CHECK(st[i].name == c.states[i]);
        CHECK(st[i].numel == 10);
        for (int k = 0; k < 10; ++k) CHECK(st[i].data[k] == 0.f);  // zero-initialised
      }
      auto now = device->stats().current[size_t(dscpp::MemCategory::optimizer_state)];
      CHECK(now - before >= int64_t((10 + 5) * 4 * c.states.size()));
      std::vector<float> w(10, 1.f), g(10, 0.5f);
      opt->step(0, w.data(), g.data(), {});
      opt->step(1, nullptr, nullptr, {});
      CHECK(opt->step_count(0) == 1);
      CHECK(opt->step_count(1) == 1);
      CHECK(opt->step_count(2) == 0);
      opt->set_step_count(2, 41);
      CHECK(opt->step_count(2) == 41);
      REQUIRE_THROWS_AS(opt->step(3, w.data(), g.data(), {}), dscpp::Error);
      REQUIRE_THROWS_AS(opt->add_group(10, {{5, 10}}), dscpp::Error);            // past the end
      REQUIRE_THROWS_AS(opt->add_group(10, {{0, 6}, {5, 5}}), dscpp::Error);     // overlap
    }
    CHECK(device->stats().current[size_t(dscpp::MemCategory::optimizer_state)] == before);
  }
}

TEST_CASE("A resumed step count continues the bias correction", "[optimizers]") {
  // 3 steps, then a fresh optimizer loaded with the state and step count continues identically.
  auto config = make_config(Kind::adamw, "AdamW", [](auto& p) { p.lr = 0.1, p.eps = 1e-2, p.weight_decay = 0.1; });
  auto device = dscpp::make_cpu_device();
  const int64_t n = 1000;
  auto a = dscpp::runtime::make_optimizer(config, *device);
  a->add_group(n, {});
  std::vector<float> wa = uniform(n, 1, -1.f, 1.f);
  for (int t = 1; t <= 3; ++t) a->step(0, wa.data(), uniform(n, 600 + t, -1.f, 1.f).data(), {});
  auto b = dscpp::runtime::make_optimizer(config, *device);
  b->add_group(n, {});
  auto sa = a->state(0), sb = b->state(0);
  for (size_t i = 0; i < sa.size(); ++i) std::memcpy(sb[i].data, sa[i].data, n * sizeof(float));
  b->set_step_count(0, 3);
  std::vector<float> wb = wa;
  auto g = uniform(n, 604, -1.f, 1.f);
  a->step(0, wa.data(), g.data(), {});
  b->step(0, wb.data(), g.data(), {});
  REQUIRE(wa == wb);
}

TEST_CASE("External state (optimizer offload) steps exactly like owned state", "[optimizers]") {
  // Same math, state elsewhere: bit-identical weights and state. The external arrays start as
  // garbage, so bind_state(initialise) must really write the initial state (Adagrad's
  // accumulator value included).
  auto device = dscpp::make_cpu_device();
  const int64_t n = 777;
  for (auto config : {make_config(Kind::adamw, "AdamW", [](auto& p) { p.weight_decay = 0.1; }),
                      make_config(Kind::adagrad, "Adagrad", [](auto& p) { p.initial_accumulator_value = 0.25; }),
                      make_config(Kind::lion, "Lion")}) {
    CAPTURE(config.type);
    auto a = dscpp::runtime::make_optimizer(config, *device);
    auto b = dscpp::runtime::make_optimizer(config, *device);
    a->add_group(n, {});
    const auto before = device->stats().current[size_t(dscpp::MemCategory::optimizer_state)];
    REQUIRE(b->add_external_group(n, {}) == 0);
    CHECK(device->stats().current[size_t(dscpp::MemCategory::optimizer_state)] == before);  // nothing allocated
    REQUIRE(b->state_names().size() == a->state(0).size());
    std::vector<std::vector<float>> ext(b->state_names().size(), std::vector<float>(n, 123.f));
    std::vector<float*> ptrs;
    for (auto& e : ext) ptrs.push_back(e.data());
    b->bind_state(0, ptrs, true);
    std::vector<float> wa = uniform(n, 7, -1.f, 1.f), wb = wa;
    for (int t = 1; t <= 3; ++t) {
      auto g = uniform(n, 700 + t, -1.f, 1.f);
      a->step(0, wa.data(), g.data(), {});
      // Moved between steps, as swapping does: only the bound arrays count.
      auto moved = ext;
      ptrs.clear();
      for (auto& e : moved) ptrs.push_back(e.data());
      b->bind_state(0, ptrs, false);
      b->step(0, wb.data(), g.data(), {});
      ext = moved;
    }
    REQUIRE(wa == wb);
    auto sa = a->state(0);
    for (size_t i = 0; i < sa.size(); ++i) CHECK(std::vector<float>(sa[i].data, sa[i].data + n) == ext[i]);
    REQUIRE_THROWS_AS(a->bind_state(0, ptrs, false), dscpp::Error);  // owned groups are not bound
  }
  // SGD without momentum would create its buffer lazily: refused for external state.
  auto sgd = dscpp::runtime::make_optimizer(make_config(Kind::sgd, "SGD"), *device);
  sgd->add_external_group(4, {});
  sgd->bind_state(0, {}, true);
  std::vector<float> w(4, 1.f), g(4, 1.f);
  dscpp::runtime::StepOverrides o;
  o.momentum = 0.9;
  REQUIRE_THROWS_WITH(sgd->step(0, w.data(), g.data(), o), Catch::Contains("optimizer offload"));
}

TEST_CASE("Unsupported optimizers and bad parameters are errors", "[optimizers]") {
  auto device = dscpp::make_cpu_device();
  for (auto [kind, type] : std::vector<std::pair<Kind, std::string>>{{Kind::onebit_adam, "OneBitAdam"},
                                                                     {Kind::zero_one_adam, "ZeroOneAdam"},
                                                                     {Kind::onebit_lamb, "OneBitLamb"},
                                                                     {Kind::muon, "Muon"},
                                                                     {Kind::rmsprop, "RMSprop"},
                                                                     {Kind::sparse_adam, "SparseAdam"}}) {
    try {
      dscpp::runtime::make_optimizer(make_config(kind, type), *device);
      FAIL("no error for " << type);
    } catch (const dscpp::Error& e) {
      std::string msg = e.what();
      CHECK(msg.find(type) != std::string::npos);
      for (const char* s : {"Adam", "AdamW", "Lamb", "Lion", "Adagrad", "SGD"}) CHECK(msg.find(s) != std::string::npos);
    }
  }
  auto bad = [&](Kind kind, const std::string& type, std::function<void(dscpp::config::OptimizerParams&)> set) {
    REQUIRE_THROWS_AS(dscpp::runtime::make_optimizer(make_config(kind, type, set), *device), dscpp::Error);
  };
  bad(Kind::adam, "Adam", [](auto& p) { p.amsgrad = true; });
  bad(Kind::lamb, "Lamb", [](auto& p) { p.amsgrad = true; });
  bad(Kind::adamw, "AdamW", [](auto& p) { p.betas = {0.9}; });
  bad(Kind::adamw, "AdamW", [](auto& p) { p.betas = {1.0, 0.999}; });
  bad(Kind::adamw, "AdamW", [](auto& p) { p.lr = -1; });
  bad(Kind::sgd, "SGD", [](auto& p) { p.nesterov = true; });  // nesterov needs momentum
  bad(Kind::lamb, "Lamb", [](auto& p) { p.min_coeff = 20; });
  auto opt = dscpp::runtime::make_optimizer(make_config(Kind::adam, "Adam"), *device);
  opt->add_group(4, {});
  std::vector<float> w(4, 0.f), g(4, 0.f);
  StepOverrides o;
  o.lr = -0.1;
  REQUIRE_THROWS_AS(opt->step(0, w.data(), g.data(), o), dscpp::Error);
  CHECK(opt->step_count(0) == 0);
}
