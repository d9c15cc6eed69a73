// Loss scalers against fixed test vectors. They were printed by DeepSpeed 0.19.8's own classes
// (DynamicLossScaler.update_scale for the ZeRO rule, FP16_Optimizer._update_scale for the
// legacy rule) on these patterns, not worked out from this code; the system test ds_rules
// (tests/system/ds_rules.py) runs those classes live over many more patterns.
#include "configs/load.h"
#include "configs/plans.h"
#include "core/error.h"
#include "runtime/optim/loss_scaler.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using dscpp::runtime::LossScaler;
using dscpp::runtime::LossScaleRule;
using dscpp::runtime::LossScalePlan;
using dscpp::runtime::LossScalerState;

namespace {

// '.' = clean step, 'X' = overflow. kPattern never has 5 clean steps after an overflow, so with
// window 4 nothing doubles after one; kRegrow has one more clean step and doubles at step 11.
const std::string kPattern = "....XX....X.X.XX";
const std::string kRegrow = "....XX.....X.X.XX";

LossScalePlan dynamic(LossScaleRule rule, int power, int64_t window, int64_t hysteresis, bool consecutive = false,
                          double min_scale = 1.0) {
  LossScalePlan o;
  o.rule = rule;
  o.init_scale = std::ldexp(1.0, power);
  o.scale_window = window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive;
  o.min_scale = min_scale;
  o.raise_at_min_scale = rule == LossScaleRule::zero;
  return o;
}

// "exponent/hysteresis" after each step, the reference's notation (scales are powers of 2 here).
std::vector<std::string> run(LossScaler& s, const std::string& pattern, bool with_hysteresis = true) {
  std::vector<std::string> out;
  for (char c : pattern) {
    s.update(c == 'X');
    int exponent = std::ilogb(s.scale());
    REQUIRE(std::ldexp(1.0, exponent) == s.scale());
    out.push_back(with_hysteresis ? std::to_string(exponent) + "/" + std::to_string(s.state().cur_hysteresis)
                                  : std::to_string(exponent));
  }
  return out;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

LossScalePlan options_for(const std::string& json) {
  auto loaded = dscpp::config::load_config_text(json, "t.json", {});
  INFO(loaded.diagnostics.format("t.json"));
  REQUIRE(loaded.ok());
  return dscpp::config::loss_scale_plan(loaded.config);
}

}  // namespace

TEST_CASE("ZeRO DynamicLossScaler: reference vector, plain hysteresis") {
  LossScaler s(dynamic(LossScaleRule::zero, 16, 4, 2));
  CHECK(s.scale() == 65536.0);
  CHECK(s.dynamic());
  CHECK(run(s, kPattern) ==
        words("16/2 16/2 16/2 16/2 16/1 15/1 15/1 15/1 15/1 15/1 14/1 14/1 13/1 13/1 12/1 11/1"));
  // 6 overflows in the pattern (steps 5, 6, 11, 13, 15, 16): each skips an optimizer step, absorbed or not.
  CHECK(s.state().skipped_steps == 6);
  CHECK(s.state().cur_iter == 16);
  CHECK(s.state().last_overflow_iter == 15);
  // Up to 0.16.4 the first doubling came on the 4th clean step (17/2 at step 4); 0.19.8 leaves
  // the first clean step after an overflow (or the first step of the run) out of the window.
  LossScaler regrow(dynamic(LossScaleRule::zero, 16, 4, 2));
  CHECK(run(regrow, kRegrow) ==
        words("16/2 16/2 16/2 16/2 16/1 15/1 15/1 15/1 15/1 15/1 16/2 16/1 16/1 15/1 15/1 14/1 13/1"));
}

TEST_CASE("ZeRO DynamicLossScaler: reference vector, consecutive_hysteresis") {
  LossScaler s(dynamic(LossScaleRule::zero, 16, 4, 2, true));
  CHECK(run(s, kPattern) ==
        words("16/2 16/2 16/2 16/2 16/1 15/1 15/2 15/2 15/2 15/2 15/1 15/2 15/1 15/2 15/1 14/1"));
  LossScaler regrow(dynamic(LossScaleRule::zero, 16, 4, 2, true));
  CHECK(run(regrow, kRegrow) ==
        words("16/2 16/2 16/2 16/2 16/1 15/1 15/2 15/2 15/2 15/2 16/2 16/1 16/2 16/1 16/2 16/1 15/1"));
}

TEST_CASE("legacy FP16_Optimizer rule: reference vectors (no hysteresis, the ZeRO rule's window)") {
  SECTION("9 clean steps") {
    LossScaler legacy(dynamic(LossScaleRule::legacy, 16, 4, 1));
    CHECK(run(legacy, ".........", false) == words("16 16 16 16 17 17 17 17 18"));
    // The ZeRO rule on the same steps: since 0.19.8 it doubles on the same steps.
    LossScaler zero(dynamic(LossScaleRule::zero, 16, 4, 2));
    CHECK(run(zero, ".........", false) == words("16 16 16 16 17 17 17 17 18"));
  }
  SECTION("the overflow pattern") {
    LossScaler legacy(dynamic(LossScaleRule::legacy, 16, 4, 1));
    CHECK(run(legacy, kPattern, false) == words("16 16 16 16 15 14 14 14 14 14 13 13 12 12 11 10"));
    CHECK(legacy.state().skipped_steps == 6);
  }
}

TEST_CASE("at the minimum scale the ZeRO rule raises, the legacy rule clamps") {
  SECTION("ZeRO, hysteresis 1: 4 -> 2 -> 1 -> error, state untouched") {
    LossScaler s(dynamic(LossScaleRule::zero, 2, 1000, 1));
    s.update(true);
    s.update(true);
    CHECK(s.scale() == 1.0);
    LossScalerState before = s.state();
    try {
      s.update(true);
      FAIL("no error at the minimum loss scale");
    } catch (const dscpp::Error& e) {
      std::string m = e.what();
      CHECK(m.find("min_loss_scale = 1") != std::string::npos);
      CHECK(m.find("minimum 1") != std::string::npos);
      CHECK(m.find("bf16") != std::string::npos);
    }
    CHECK(s.state().cur_iter == before.cur_iter);
    CHECK(s.state().skipped_steps == before.skipped_steps);
    CHECK(s.scale() == 1.0);
  }
  SECTION("ZeRO, hysteresis 2: the first overflow at the minimum is absorbed, the second raises") {
    LossScaler s(dynamic(LossScaleRule::zero, 0, 1000, 2, false, 1.0));
    s.update(true);
    CHECK(s.scale() == 1.0);
    CHECK(s.state().cur_hysteresis == 1);
    CHECK_THROWS_AS(s.update(true), dscpp::Error);
  }
  SECTION("a minimum above the halved scale clamps before it raises") {
    LossScaler s(dynamic(LossScaleRule::zero, 2, 1000, 1, false, 3.0));
    s.update(true);
    CHECK(s.scale() == 3.0);  // max(4/2, 3)
    CHECK_THROWS_AS(s.update(true), dscpp::Error);
  }
  SECTION("legacy never raises") {
    LossScaler s(dynamic(LossScaleRule::legacy, 2, 1000, 1));
    for (int i = 0; i < 10; ++i) s.update(true);
    CHECK(s.scale() == 1.0);
    CHECK(s.state().skipped_steps == 10);
  }
}

TEST_CASE("static and no scaling") {
  SECTION("static: constant, overflowing steps still counted as skipped") {
    LossScalePlan o;
    o.rule = LossScaleRule::fixed;
    o.init_scale = 128;
    LossScaler s(o);
    CHECK_FALSE(s.dynamic());
    CHECK(s.checks_overflow());
    for (char c : kPattern) s.update(c == 'X');
    CHECK(s.scale() == 128.0);
    CHECK(s.state().skipped_steps == 6);
  }
  SECTION("none: scale 1, no overflow check") {
    LossScaler s(LossScalePlan{});
    CHECK(s.scale() == 1.0);
    CHECK_FALSE(s.dynamic());
    CHECK_FALSE(s.checks_overflow());
    for (int i = 0; i < 2000; ++i) s.update(false);
    CHECK(s.scale() == 1.0);
  }
}

TEST_CASE("state round trip mid-sequence continues identically") {
  for (bool consecutive : {false, true}) {
    for (LossScaleRule rule : {LossScaleRule::zero, LossScaleRule::legacy}) {
      INFO("rule " << dscpp::runtime::rule_name(rule) << ", consecutive " << consecutive);
      LossScalePlan o = dynamic(rule, 16, 4, 2, consecutive);
      LossScaler whole(o);
      std::vector<std::string> expected = run(whole, kRegrow);
      // Stop after step 5 (inside the hysteresis-absorbed stretch) and after 11
      // (the doubling step).
      for (size_t cut : {5u, 11u}) {
        LossScaler first(o);
        std::vector<std::string> got = run(first, kRegrow.substr(0, cut));
        LossScalerState saved = first.state();
        LossScaler second(o);
        second.restore(saved);
        CHECK(second.state().cur_hysteresis == saved.cur_hysteresis);
        std::vector<std::string> rest = run(second, kRegrow.substr(cut));
        got.insert(got.end(), rest.begin(), rest.end());
        CHECK(got == expected);
        CHECK(second.state().skipped_steps == whole.state().skipped_steps);
      }
    }
  }
}

TEST_CASE("restore rejects impossible states") {
  LossScaler s(dynamic(LossScaleRule::zero, 16, 4, 2));
  LossScalerState bad;
  bad.cur_scale = 0;
  CHECK_THROWS_AS(s.restore(bad), dscpp::Error);
  bad = LossScalerState{};
  bad.cur_iter = 3;
  bad.last_overflow_iter = 3;
  CHECK_THROWS_AS(s.restore(bad), dscpp::Error);
  bad = LossScalerState{};
  bad.cur_hysteresis = 0;
  CHECK_THROWS_AS(s.restore(bad), dscpp::Error);
  CHECK(s.scale() == 65536.0);
}

TEST_CASE("options from the config") {
  SECTION("fp16 enabled alone, ZeRO: the documented defaults, not DeepSpeed v0.16.4's 2^32") {
    auto o = options_for(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
    CHECK(o.rule == LossScaleRule::zero);
    CHECK(o.init_scale == 65536.0);
    CHECK(o.scale_window == 1000);
    CHECK(o.hysteresis == 2);
    CHECK_FALSE(o.consecutive_hysteresis);
    CHECK(o.min_scale == 1.0);
    CHECK(o.raise_at_min_scale);
  }
  SECTION("explicit keys, ZeRO stage 3") {
    auto o = options_for(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3},
        "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 50, "hysteresis": 4,
                 "consecutive_hysteresis": true, "min_loss_scale": 8}})");
    CHECK(o.rule == LossScaleRule::zero);
    CHECK(o.init_scale == 4096.0);
    CHECK(o.scale_window == 50);
    CHECK(o.hysteresis == 4);
    CHECK(o.consecutive_hysteresis);
    CHECK(o.min_scale == 8.0);
    LossScaler s(o);
    CHECK(s.state().cur_hysteresis == 4);
  }
  SECTION("stage 0: the legacy rule, hysteresis not used, never raises") {
    auto o = options_for(R"({"train_batch_size": 8, "fp16": {"enabled": true, "hysteresis": 5}})");
    CHECK(o.rule == LossScaleRule::legacy);
    CHECK(o.init_scale == 65536.0);
    CHECK(o.hysteresis == 1);
    CHECK_FALSE(o.raise_at_min_scale);
  }
  SECTION("static loss_scale") {
    auto o = options_for(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 512},
        "zero_optimization": {"stage": 1}})");
    CHECK(o.rule == LossScaleRule::fixed);
    CHECK(o.init_scale == 512.0);
  }
  SECTION("fp16 disabled (fp32), and bf16: no scaling") {
    auto fp32 = options_for(R"({"train_batch_size": 8, "fp16": {"enabled": false, "initial_scale_power": 10}})");
    CHECK(fp32.rule == LossScaleRule::none);
    CHECK(fp32.init_scale == 1.0);
    auto bf16 = options_for(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
    CHECK(bf16.rule == LossScaleRule::none);
    CHECK(LossScaler(bf16).scale() == 1.0);
  }
}

TEST_CASE("bad options are user errors naming the key") {
  LossScalePlan o = dynamic(LossScaleRule::zero, 16, 0, 2);
  try {
    LossScaler s(o);
    FAIL("window 0 accepted");
  } catch (const dscpp::Error& e) {
    CHECK(std::string(e.what()).find("fp16.loss_scale_window") != std::string::npos);
  }
}
