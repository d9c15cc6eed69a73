// LR schedules against values worked out by hand from DeepSpeed's lr_schedules.py formulas
// (the arithmetic is spelled out next to each expectation, independent of the implementation).
#include "core/error.h"
#include "runtime/optim/lr_schedule.h"

#include <catch2/catch.hpp>

#include <vector>

using dscpp::runtime::LrSchedule;
using dscpp::runtime::make_lr_schedule;
using Kind = dscpp::config::SchedulerKind;

namespace {

dscpp::config::SchedulerConfig sched(const char* type, Kind kind) {
  dscpp::config::SchedulerConfig c;
  c.type = type;
  c.kind = kind;
  return c;
}

// The LR the optimizer step after `t` completed schedule steps uses (t = −1: before any).
double lr_at(LrSchedule& s, int64_t t) {
  s.set_last_batch_iteration(t);
  return s.lr();
}

Approx near(double v) { return Approx(v).epsilon(1e-12).margin(1e-15); }

}  // namespace

TEST_CASE("no scheduler block: constant at the optimizer's lr") {
  auto s = make_lr_schedule(std::nullopt, 0.003, 0.9);
  CHECK(s->name() == "constant");
  CHECK(s->lr() == 0.003);
  CHECK(s->last_batch_iteration() == -1);
  for (int i = 0; i < 5; ++i) s->step();
  CHECK(s->lr() == 0.003);
  CHECK(s->last_batch_iteration() == 4);
  CHECK_FALSE(s->momentum());
  CHECK_FALSE(s->beta2());
}

TEST_CASE("WarmupLR log warmup") {
  auto c = sched("WarmupLR", Kind::warmup_lr);
  c.params.warmup_min_lr = {0.0};
  c.params.warmup_max_lr = {0.1};
  c.params.warmup_num_steps = 10;
  auto s = make_lr_schedule(c, 0.5, 0.9);
  CHECK(s->name() == "WarmupLR");
  // Constructor writes min_lr: the first optimizer step runs at 0.
  CHECK(s->lr() == 0.0);
  CHECK_FALSE(s->momentum());
  s->step();  // t = 0: ln(1)/ln(10) = 0
  CHECK(s->lr() == near(0.0));
  s->step();  // t = 1: 0.1·ln2/ln10 = 0.1·0.30102999566398120
  CHECK(s->lr() == near(0.030102999566398120));
  CHECK(lr_at(*s, 4) == near(0.1 * 0.69897000433601886));  // log10(5)
  CHECK(lr_at(*s, 9) == near(0.1));   // last warmup step: ln10/ln10 = 1
  CHECK(lr_at(*s, 10) == near(0.1));  // after warmup: gamma 1
  CHECK(lr_at(*s, 5000) == near(0.1));
}

TEST_CASE("WarmupLR linear warmup, default max = optimizer lr, N clamps to 2") {
  auto c = sched("WarmupLR", Kind::warmup_lr);
  c.params.warmup_min_lr = {0.01};
  c.params.warmup_num_steps = 4;
  c.params.warmup_type = "linear";
  auto s = make_lr_schedule(c, 0.11, 0.9);  // warmup_max_lr unset: the optimizer's 0.11
  CHECK(s->lr() == 0.01);
  CHECK(lr_at(*s, 0) == near(0.01));          // 0/4
  CHECK(lr_at(*s, 1) == near(0.035));         // 0.01 + 0.1·1/4
  CHECK(lr_at(*s, 3) == near(0.085));         // 0.01 + 0.1·3/4: last warmup step
  CHECK(lr_at(*s, 4) == near(0.11));          // t = N: done
  CHECK(lr_at(*s, 99) == near(0.11));
  CHECK(lr_at(*s, -1) == 0.01);               // restoring −1 gives the constructor's value

  c.params.warmup_num_steps = 1;  // N = max(2, 1) = 2
  c.params.warmup_type = "log";
  auto s2 = make_lr_schedule(c, 0.11, 0.9);
  CHECK(lr_at(*s2, 0) == near(0.01));  // ln1/ln2 = 0
  CHECK(lr_at(*s2, 1) == near(0.11));  // ln2/ln2 = 1
}

TEST_CASE("WarmupDecayLR decays linearly to 0 at total_num_steps and stays there") {
  auto c = sched("WarmupDecayLR", Kind::warmup_decay_lr);
  c.params.warmup_min_lr = {0.0};
  c.params.warmup_max_lr = {0.1};
  c.params.warmup_num_steps = 4;
  c.params.warmup_type = "linear";
  c.params.total_num_steps = 10;
  auto s = make_lr_schedule(c, 1.0, 0.9);
  CHECK(s->lr() == 0.0);
  CHECK(lr_at(*s, 3) == near(0.075));          // 0.1·3/4
  CHECK(lr_at(*s, 4) == near(0.1));            // (10−4)/(10−4) = 1
  CHECK(lr_at(*s, 5) == near(0.1 * 5.0 / 6));  // (10−5)/6
  CHECK(lr_at(*s, 9) == near(0.1 / 6));        // (10−9)/6
  CHECK(lr_at(*s, 10) == near(0.0));
  CHECK(lr_at(*s, 12) == 0.0);  // max(0, −2/6)

  // Without warmup_max_lr WarmupDecayLR uses its own default 0.001 (not the optimizer's lr).
  c.params.warmup_max_lr.clear();
  auto d = make_lr_schedule(c, 1.0, 0.9);
  CHECK(lr_at(*d, 4) == near(0.001));

  // total < N: the divisor is max(1, T−N) and the result clamps to 0 after warmup.
  c.params.total_num_steps = 2;
  auto e = make_lr_schedule(c, 1.0, 0.9);
  CHECK(lr_at(*e, 3) == near(0.00075));
  CHECK(lr_at(*e, 4) == 0.0);
}

TEST_CASE("WarmupCosineLR: ratio warmup then cosine to cos_min_ratio") {
  auto c = sched("WarmupCosineLR", Kind::warmup_cosine_lr);
  c.params.total_num_steps = 10;
  c.params.warmup_num_steps = 4;
  c.params.warmup_type = "linear";
  c.params.warmup_min_ratio = 0.2;
  c.params.cos_min_ratio = 0.1;
  auto s = make_lr_schedule(c, 0.1, 0.9);
  CHECK(s->lr() == 0.0);  // the constructor writes get_lr() = 0.0 for t = −1
  s->step();
  CHECK(s->lr() == near(0.02));                   // t=0: 0.2 + 0·0.8
  CHECK(lr_at(*s, 1) == near(0.04));              // 0.2 + 0.25·0.8 = 0.4
  CHECK(lr_at(*s, 3) == near(0.08));              // 0.2 + 0.75·0.8 = 0.8
  // t=4: p = (4−4+1)/(10−4) = 1/6; (1+cos(π/6))/2 = 0.93301270189221932
  CHECK(lr_at(*s, 4) == near(0.1 * (0.1 + 0.9 * 0.93301270189221932)));
  CHECK(lr_at(*s, 6) == near(0.1 * (0.1 + 0.9 * 0.5)));  // p = 3/6
  CHECK(lr_at(*s, 9) == near(0.01));                      // p = 1: cos_min_ratio
  CHECK(lr_at(*s, 10) == near(0.01));                     // clamped, no rise after T
  CHECK(lr_at(*s, 25) == near(0.01));

  c.params.warmup_type = "log";
  auto l = make_lr_schedule(c, 0.1, 0.9);
  CHECK(lr_at(*l, 1) == near(0.06));  // ln2/ln4 = 0.5 → 0.2 + 0.5·0.8
  CHECK(lr_at(*l, 3) == near(0.1));   // ln4/ln4 = 1

  // T == N: no decay window; the divisor is max(1, 0) and progress clamps to 1.
  c.params.total_num_steps = 4;
  auto z = make_lr_schedule(c, 0.1, 0.9);
  CHECK(lr_at(*z, 4) == near(0.01));
}

TEST_CASE("OneCycle: triangle, momentum, decay") {
  auto c = sched("OneCycle", Kind::one_cycle);
  c.params.cycle_min_lr = {0.01};
  c.params.cycle_max_lr = {0.1};
  c.params.cycle_first_step_size = 4;  // second defaults to 4: L = 8, ρ = 0.5
  c.params.decay_step_size = 2;
  c.params.decay_lr_rate = 0.5;
  c.params.decay_mom_rate = 0.1;
  auto s = make_lr_schedule(c, 0.5, 0.95);
  // Constructor: lr = cycle_min_lr, betas = (cycle_min_mom, 0.99).
  CHECK(s->lr() == 0.01);
  REQUIRE(s->momentum());
  CHECK(*s->momentum() == 0.8);
  CHECK(*s->beta2() == 0.99);
  s->step();  // t=0: b=1, x=1/8 → s=0.25
  CHECK(s->lr() == near(0.0325));
  CHECK(*s->momentum() == near(0.875));
  CHECK(*s->beta2() == 0.99);
  CHECK(lr_at(*s, 3) == near(0.1));  // b=4: x=0.5 → s=1 (peak)
  CHECK(*s->momentum() == near(0.8));
  CHECK(lr_at(*s, 4) == near(0.0775));  // b=5: x=0.625 → s=(0.625−1)/(0.5−1)=0.75
  CHECK(*s->momentum() == near(0.825));
  CHECK(lr_at(*s, 7) == near(0.01));  // b=8: new cycle, x=0 → s=0 (still t < L)
  CHECK(*s->momentum() == near(0.9));
  CHECK(lr_at(*s, 8) == near(0.008));  // decay d=1: 0.01/(1+0.5·1/2)
  CHECK(*s->momentum() == near(0.945));  // 0.9·(1+0.1·1/2)
  CHECK(lr_at(*s, 11) == near(0.005));   // d=4: 0.01/(1+0.5·2)
  CHECK(*s->momentum() == near(1.08));   // 0.9·1.2

  c.params.decay_step_size = 0;  // decay skipped: hold min lr / max mom
  auto n = make_lr_schedule(c, 0.5, 0.95);
  CHECK(lr_at(*n, 20) == 0.01);
  CHECK(*n->momentum() == 0.9);
}

TEST_CASE("OneCycle: asymmetric halves, no momentum cycling") {
  auto c = sched("OneCycle", Kind::one_cycle);
  c.params.cycle_min_lr = {0.0};
  c.params.cycle_max_lr = {1.0};
  c.params.cycle_first_step_size = 2;
  c.params.cycle_second_step_size = 6;  // L = 8, ρ = 0.25
  c.params.cycle_momentum = false;
  auto s = make_lr_schedule(c, 0.5, 0.9);
  CHECK_FALSE(s->momentum());
  CHECK_FALSE(s->beta2());
  CHECK(lr_at(*s, 0) == near(0.5));             // x = 1/8 → 0.125/0.25
  CHECK(lr_at(*s, 1) == near(1.0));             // x = 0.25
  CHECK(lr_at(*s, 2) == near(0.625 / 0.75));    // (0.375−1)/(0.25−1)
  CHECK(lr_at(*s, 6) == near(0.125 / 0.75));    // (0.875−1)/(−0.75)
  CHECK_FALSE(s->momentum());
}

TEST_CASE("OneCycle: staircase halves") {
  auto c = sched("OneCycle", Kind::one_cycle);
  c.params.cycle_min_lr = {0.01};
  c.params.cycle_max_lr = {0.1};
  c.params.cycle_first_step_size = 4;
  c.params.cycle_first_stair_count = 2;  // second count defaults to the first
  auto s = make_lr_schedule(c, 0.5, 0.9);
  // i = b mod 8; first half pos = i·2/4, second pos = (8−i)·2/4; s = floor(pos)/2
  CHECK(lr_at(*s, 0) == near(0.01));   // pos 0.5 → 0
  CHECK(*s->momentum() == near(0.9));
  CHECK(lr_at(*s, 1) == near(0.055));  // pos 1 → 0.5
  CHECK(*s->momentum() == near(0.85));
  CHECK(lr_at(*s, 2) == near(0.055));  // pos 1.5 → 0.5
  CHECK(lr_at(*s, 3) == near(0.1));    // pos 2 → 1
  CHECK(lr_at(*s, 4) == near(0.055));  // i=5: pos 1.5 → 0.5
  CHECK(lr_at(*s, 5) == near(0.055));  // i=6: pos 1
  CHECK(lr_at(*s, 6) == near(0.01));   // i=7: pos 0.5 → 0

  c.params.cycle_second_stair_count = 0;  // second half continuous again
  auto t = make_lr_schedule(c, 0.5, 0.9);
  CHECK(lr_at(*t, 2) == near(0.055));
  CHECK(lr_at(*t, 4) == near(0.0775));  // s = 0.75
}

TEST_CASE("LRRangeTest continuous vs staircase") {
  auto c = sched("LRRangeTest", Kind::lr_range_test);
  c.params.lr_range_test_min_lr = {0.001};
  c.params.lr_range_test_step_size = 4;
  c.params.lr_range_test_step_rate = 2.0;
  auto s = make_lr_schedule(c, 0.5, 0.9);
  CHECK(s->lr() == 0.001);
  CHECK(lr_at(*s, 0) == near(0.0015));  // 0.001·(1 + 2·1/4)
  CHECK(lr_at(*s, 2) == near(0.0025));  // 0.001·(1 + 2·3/4)
  CHECK(lr_at(*s, 3) == near(0.003));   // 0.001·(1 + 2·1)
  c.params.lr_range_test_staircase = true;
  auto st = make_lr_schedule(c, 0.5, 0.9);
  CHECK(lr_at(*st, 0) == near(0.001));  // floor(1/4) = 0
  CHECK(lr_at(*st, 2) == near(0.001));
  CHECK(lr_at(*st, 3) == near(0.003));  // floor(4/4) = 1
  CHECK(lr_at(*st, 7) == near(0.005));  // floor(8/4) = 2
  CHECK_FALSE(st->momentum());
}

TEST_CASE("set_last_batch_iteration restores every schedule exactly") {
  std::vector<dscpp::config::SchedulerConfig> configs;
  configs.push_back(sched("WarmupLR", Kind::warmup_lr));
  configs.back().params.warmup_num_steps = 7;
  configs.push_back(sched("WarmupDecayLR", Kind::warmup_decay_lr));
  configs.back().params.warmup_num_steps = 5;
  configs.back().params.total_num_steps = 20;
  configs.push_back(sched("WarmupCosineLR", Kind::warmup_cosine_lr));
  configs.back().params.warmup_num_steps = 5;
  configs.back().params.total_num_steps = 20;
  configs.push_back(sched("OneCycle", Kind::one_cycle));
  configs.back().params.cycle_min_lr = {0.01};
  configs.back().params.cycle_max_lr = {0.1};
  configs.back().params.cycle_first_step_size = 3;
  configs.back().params.cycle_second_stair_count = 2;
  configs.back().params.decay_step_size = 2;
  configs.back().params.decay_lr_rate = 0.3;
  configs.push_back(sched("LRRangeTest", Kind::lr_range_test));
  configs.back().params.lr_range_test_step_size = 3;
  for (const auto& c : configs) {
    INFO(c.type);
    auto run = make_lr_schedule(c, 0.05, 0.9);
    std::vector<double> lrs{run->lr()};
    std::vector<std::optional<double>> moms{run->momentum()};
    for (int i = 0; i < 30; ++i) {
      run->step();
      lrs.push_back(run->lr());
      moms.push_back(run->momentum());
    }
    auto restored = make_lr_schedule(c, 0.05, 0.9);
    for (int64_t t = 29; t >= -1; t -= 3) {
      restored->set_last_batch_iteration(t);
      CHECK(restored->last_batch_iteration() == t);
      CHECK(restored->lr() == lrs[static_cast<size_t>(t + 1)]);
      CHECK(restored->momentum() == moms[static_cast<size_t>(t + 1)]);
    }
    restored->set_last_batch_iteration(10);
    restored->step();
    CHECK(restored->lr() == lrs[12]);
  }
}

TEST_CASE("configured last_batch_iteration: the optimizer's lr until the first step") {
  auto c = sched("WarmupLR", Kind::warmup_lr);
  c.params.warmup_max_lr = {0.1};
  c.params.warmup_num_steps = 4;
  c.params.warmup_type = "linear";
  c.params.last_batch_iteration = 1;
  auto s = make_lr_schedule(c, 0.7, 0.9);
  CHECK(s->last_batch_iteration() == 1);
  CHECK(s->lr() == 0.7);  // DeepSpeed writes nothing at construction then
  s->step();              // t = 2: 0.1·2/4
  CHECK(s->lr() == near(0.05));
}

TEST_CASE("torch.optim.lr_scheduler classes are not built (the config check lists them first)") {
  auto torch = sched("StepLR", Kind::step_lr);
  torch.params.step_size = 3;
  CHECK_THROWS_WITH(make_lr_schedule(torch, 0.1, 0.9), Catch::Contains("StepLR"));
  CHECK_THROWS_AS(make_lr_schedule(sched("ReduceLROnPlateau", Kind::reduce_lr_on_plateau), 0.1, 0.9),
                  dscpp::Error);
}

TEST_CASE("warmup_num_steps 0 (the HF Trainer's default through auto) warms up over N = max(2, 0) = 2 steps") {
  auto c = sched("WarmupLR", Kind::warmup_lr);
  c.params.warmup_max_lr = {0.1};
  c.params.warmup_num_steps = 0;
  c.params.warmup_type = "linear";
  auto s = make_lr_schedule(c, 0.1, 0.9);
  s->step();  // t = 0
  CHECK(s->lr() == near(0.0));
  s->step();  // t = 1: 0.1 · 1/2
  CHECK(s->lr() == near(0.05));
  s->step();  // t = 2: warm
  CHECK(s->lr() == near(0.1));
}
