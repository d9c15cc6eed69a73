// The optimizers against their published update rules (the references and the tolerance:
// optimizer_refs.h).
#include "core/error.h"
#include "tests/unit/optimizer_refs.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace optim_test;

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
