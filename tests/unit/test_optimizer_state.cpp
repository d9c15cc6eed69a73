// The optimizers beyond one rule: bit-identical results across threads and SIMD levels, state
// tensors and step counts, externally owned state, and the errors (optimizer_refs.h: the
// references and the tolerance).
#include "core/error.h"
#include "tests/unit/optimizer_refs.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace optim_test;

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

TEST_CASE("Unsupported optimizers and a negative scheduled lr are errors (the config check refuses bad parameters)",
          "[optimizers]") {
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
  auto opt = dscpp::runtime::make_optimizer(make_config(Kind::adam, "Adam"), *device);
  opt->add_group(4, {});
  std::vector<float> w(4, 0.f), g(4, 0.f);
  StepOverrides o;
  o.lr = -0.1;
  REQUIRE_THROWS_AS(opt->step(0, w.data(), g.data(), o), dscpp::Error);
  CHECK(opt->step_count(0) == 0);
}
