// DeepSpeed's LR schedules (deepspeed/runtime/lr_schedules.py, the current release's code).
//
// Each schedule is a pure function of `t` = last_batch_iteration for t ≥ 0, plus the values
// DeepSpeed's constructor writes into the optimizer for t = −1. Keeping the state to the one
// integer makes set_last_batch_iteration() an exact restore, as DeepSpeed's state_dict is.
#include "runtime/optim/lr_schedule.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

// The config check (configs/rules.cpp, the schema's ranges and required keys) has refused bad
// parameters and listed what dscpp does not run before a schedule is built here.

namespace dscpp::runtime {
namespace {

using config::SchedulerKind;
using config::SchedulerParams;

// dscpp trains one parameter group; the config check listed longer per-group lists as
// unsupported and the schema requires the value, so exactly one is here.
double single_group(const std::vector<double>& values, const char* key, const std::string& type) {
  if (values.size() != 1)
    fail("internal: scheduler {}: {} lists {} values; the config check should have refused it", type, key,
         values.size());
  return values[0];
}

// The common protocol: `t_` plus an optional "what the optimizer holds before the first step".
class ScheduleBase : public LrSchedule {
 public:
  ScheduleBase(std::string name, int64_t last_batch_iteration, double base_lr)
      : name_(std::move(name)), t_(last_batch_iteration), base_lr_(base_lr) {
    // DeepSpeed writes the initial LR only when constructed with last_batch_iteration == −1;
    // otherwise the optimizer keeps its configured lr/betas until the first step().
    untouched_ = last_batch_iteration != -1;
  }

  std::string name() const override { return name_; }
  double lr() const override {
    if (untouched_) return base_lr_;
    return t_ < 0 ? initial_lr() : lr_at(t_);
  }
  std::optional<double> momentum() const override {
    if (untouched_) return std::nullopt;
    return t_ < 0 ? initial_momentum() : momentum_at(t_);
  }
  std::optional<double> beta2() const override { return momentum() ? forced_beta2() : std::nullopt; }
  void step() override {
    ++t_;
    untouched_ = false;
  }
  int64_t last_batch_iteration() const override { return t_; }
  void set_last_batch_iteration(int64_t it) override {
    if (it < -1) fail("scheduler {}: last_batch_iteration must be >= -1, got {}", name_, it);
    t_ = it;
    untouched_ = false;
  }

 protected:
  virtual double initial_lr() const = 0;
  virtual double lr_at(int64_t t) const = 0;
  virtual std::optional<double> initial_momentum() const { return std::nullopt; }
  virtual std::optional<double> momentum_at(int64_t) const { return std::nullopt; }
  virtual std::optional<double> forced_beta2() const { return std::nullopt; }
  double base_lr() const { return base_lr_; }

 private:
  std::string name_;
  int64_t t_;
  double base_lr_;
  bool untouched_ = false;
};

class ConstantSchedule final : public ScheduleBase {
 public:
  explicit ConstantSchedule(double lr) : ScheduleBase("constant", -1, lr) {}

 protected:
  double initial_lr() const override { return base_lr(); }
  double lr_at(int64_t) const override { return base_lr(); }
};

// The HF Trainer's schedules (transformers' get_scheduler: a torch LambdaLR over the factor
// f(s) of the optimizer's LR), which dscpp runs without a "scheduler" block. LambdaLR applies
// f(0) at construction and f(k) after k steps, so with DeepSpeed's counter t = k − 1 the LR is
// f(t + 1).
class TrainerSchedule final : public ScheduleBase {
 public:
  TrainerSchedule(const config::DefaultSchedulePlan& plan, double base_lr)
      : ScheduleBase(plan.type, -1, base_lr), type_(plan.type), warmup_(plan.warmup_steps), total_(plan.total_steps) {
    if (type_ != "linear" && type_ != "cosine" && type_ != "constant_with_warmup")
      fail("internal: lr_scheduler_type '{}' reached the schedule builder", type_);
  }

 protected:
  double initial_lr() const override { return base_lr() * factor(0); }
  double lr_at(int64_t t) const override { return base_lr() * factor(t + 1); }

 private:
  // transformers 4.44.2 optimization.py, _get_{linear,cosine,constant}_schedule_with_warmup_lr_lambda.
  double factor(int64_t s) const {
    if (s < warmup_) return static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, warmup_));
    if (type_ == "constant_with_warmup") return 1.0;
    const double after = static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    if (type_ == "linear") return std::max(0.0, static_cast<double>(total_ - s) / after);
    const double progress = static_cast<double>(s - warmup_) / after;  // cosine, half a cycle
    return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 2.0 * 0.5 * progress)));
  }
  std::string type_;
  int64_t warmup_, total_;
};

// WarmupLR and WarmupDecayLR (the latter only changes the gamma after warmup).
class WarmupSchedule final : public ScheduleBase {
 public:
  WarmupSchedule(const std::string& type, const SchedulerParams& p, double base_lr, bool decay)
      : ScheduleBase(type, p.last_batch_iteration, base_lr), decay_(decay) {
    min_lr_ = single_group(p.warmup_min_lr, "warmup_min_lr", type);
    // WarmupLR's warmup_max_lr defaults to the optimizer's lr; WarmupDecayLR passes its own
    // default 0.001 to WarmupLR explicitly, so it does not inherit that fallback.
    if (p.warmup_max_lr.empty())
      max_lr_ = decay ? 0.001 : base_lr;
    else
      max_lr_ = single_group(p.warmup_max_lr, "warmup_max_lr", type);
    n_ = std::max<int64_t>(2, p.warmup_num_steps);
    linear_ = p.warmup_type == "linear";  // anything else: DeepSpeed warns and uses log
    inverse_log_ = 1.0 / std::log(static_cast<double>(n_));
    if (decay) {
      total_ = p.total_num_steps.value();  // required by the schema
    }
  }

 protected:
  double initial_lr() const override { return min_lr_; }
  double lr_at(int64_t t) const override { return min_lr_ + (max_lr_ - min_lr_) * gamma(t); }

 private:
  double gamma(int64_t t) const {
    if (t < n_) return linear_ ? static_cast<double>(t) / static_cast<double>(n_)
                               : inverse_log_ * std::log(static_cast<double>(t + 1));
    if (!decay_) return 1.0;
    return std::max(0.0, static_cast<double>(total_ - t) / std::max(1.0, static_cast<double>(total_ - n_)));
  }

  bool decay_;
  double min_lr_ = 0, max_lr_ = 0, inverse_log_ = 0;
  int64_t n_ = 2, total_ = 0;
  bool linear_ = false;
};

class WarmupCosineSchedule final : public ScheduleBase {
 public:
  WarmupCosineSchedule(const std::string& type, const SchedulerParams& p, double base_lr)
      : ScheduleBase(type, p.last_batch_iteration, base_lr) {
    total_ = p.total_num_steps.value();  // required by the schema
    n_ = std::max<int64_t>(2, p.warmup_num_steps);
    linear_ = p.warmup_type == "linear";
    inverse_log_ = 1.0 / std::log(static_cast<double>(n_));
    warmup_min_ratio_ = p.warmup_min_ratio;
    cos_min_ratio_ = p.cos_min_ratio;
  }

 protected:
  // get_lr() returns 0.0 for t < 0 and the constructor writes it (not the warmup ratio).
  double initial_lr() const override { return 0.0; }
  double lr_at(int64_t t) const override { return base_lr() * ratio(t); }

 private:
  double ratio(int64_t t) const {
    if (t < n_) {
      double w = linear_ ? static_cast<double>(t) / static_cast<double>(n_)
                         : inverse_log_ * std::log(static_cast<double>(t + 1));
      return warmup_min_ratio_ + w * (1.0 - warmup_min_ratio_);
    }
    // Progress clamped to 1 (current DeepSpeed), so the LR stays at the floor after T.
    double real_last = static_cast<double>(t - n_ + 1);
    double real_total = std::max(1.0, static_cast<double>(total_ - n_));
    double progress = std::min(1.0, real_last / real_total);
    double c = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * c);
  }

  int64_t n_ = 2, total_ = 0;
  bool linear_ = false;
  double inverse_log_ = 0, warmup_min_ratio_ = 0, cos_min_ratio_ = 0;
};

class OneCycleSchedule final : public ScheduleBase {
 public:
  OneCycleSchedule(const std::string& type, const SchedulerParams& p, double base_lr)
      : ScheduleBase(type, p.last_batch_iteration, base_lr) {
    min_lr_ = single_group(p.cycle_min_lr, "cycle_min_lr", type);
    max_lr_ = single_group(p.cycle_max_lr, "cycle_max_lr", type);
    s1_ = static_cast<double>(p.cycle_first_step_size);
    s2_ = p.cycle_second_step_size ? static_cast<double>(*p.cycle_second_step_size) : s1_;
    total_ = s1_ + s2_;
    ratio_ = s1_ / total_;
    stairs1_ = p.cycle_first_stair_count;
    stairs2_ = p.cycle_second_stair_count.value_or(p.cycle_first_stair_count);
    // DeepSpeed skips decay when decay_step_size is 0 (math.isclose(x, 0) is x == 0) or the
    // rate is 0; a skipped decay holds cycle_min_lr / cycle_max_mom.
    decay_step_ = static_cast<double>(p.decay_step_size);
    skip_lr_decay_ = p.decay_step_size == 0 || p.decay_lr_rate == 0.0;
    skip_mom_decay_ = p.decay_step_size == 0 || p.decay_mom_rate == 0.0;
    decay_lr_rate_ = p.decay_lr_rate;
    decay_mom_rate_ = p.decay_mom_rate;
    cycle_momentum_ = p.cycle_momentum;
    min_mom_ = p.cycle_min_mom;
    max_mom_ = p.cycle_max_mom;
  }

 protected:
  double initial_lr() const override { return min_lr_; }
  double lr_at(int64_t t) const override {
    if (static_cast<double>(t) < total_) return min_lr_ + (max_lr_ - min_lr_) * scale(t);
    if (skip_lr_decay_) return min_lr_;
    return min_lr_ / (1.0 + decay_lr_rate_ * decay_interval(t));
  }
  // The constructor writes betas = (cycle_min_mom, 0.99), although the cycle formula at
  // t = −1 would give cycle_max_mom: the first step really runs with cycle_min_mom.
  std::optional<double> initial_momentum() const override {
    return cycle_momentum_ ? std::optional<double>(min_mom_) : std::nullopt;
  }
  std::optional<double> momentum_at(int64_t t) const override {
    if (!cycle_momentum_) return std::nullopt;
    if (static_cast<double>(t) < total_) return max_mom_ - (max_mom_ - min_mom_) * scale(t);
    if (skip_mom_decay_) return max_mom_;
    return max_mom_ * (1.0 + decay_mom_rate_ * decay_interval(t));
  }
  std::optional<double> forced_beta2() const override { return 0.99; }

 private:
  double decay_interval(int64_t t) const { return (static_cast<double>(t) - total_ + 1.0) / decay_step_; }

  double scale(int64_t t) const {
    double b = static_cast<double>(t + 1);
    double cycle = std::floor(1.0 + b / total_);
    double x = 1.0 + b / total_ - cycle;
    double s;
    int64_t stairs;
    if (x <= ratio_) {
      s = x / ratio_;
      stairs = stairs1_;
    } else {
      s = (x - 1.0) / (ratio_ - 1.0);
      stairs = stairs2_;
    }
    // Stairs are quantised from the integer offset in the cycle, not from `s`, as DeepSpeed
    // does: a float `s` just below a stair boundary would otherwise drop a whole stair.
    if (stairs > 0) {
      double i = std::fmod(b, total_);
      double k = static_cast<double>(stairs);
      double pos = i <= s1_ ? i * k / s1_ : (total_ - i) * k / s2_;
      s = std::floor(pos) / k;
    }
    return s;
  }

  double min_lr_ = 0, max_lr_ = 0, s1_ = 1, s2_ = 1, total_ = 2, ratio_ = 0.5;
  int64_t stairs1_ = 0, stairs2_ = 0;
  double decay_step_ = 0, decay_lr_rate_ = 0, decay_mom_rate_ = 0;
  bool skip_lr_decay_ = true, skip_mom_decay_ = true, cycle_momentum_ = true;
  double min_mom_ = 0.8, max_mom_ = 0.9;
};

class LrRangeTestSchedule final : public ScheduleBase {
 public:
  LrRangeTestSchedule(const std::string& type, const SchedulerParams& p, double base_lr)
      : ScheduleBase(type, p.last_batch_iteration, base_lr) {
    min_lr_ = single_group(p.lr_range_test_min_lr, "lr_range_test_min_lr", type);
    step_size_ = static_cast<double>(p.lr_range_test_step_size);
    rate_ = p.lr_range_test_step_rate;
    staircase_ = p.lr_range_test_staircase;
  }

 protected:
  double initial_lr() const override { return min_lr_; }
  double lr_at(int64_t t) const override {
    double interval = static_cast<double>(t + 1) / step_size_;
    if (staircase_) interval = std::floor(interval);
    return min_lr_ * (1.0 + rate_ * interval);
  }

 private:
  double min_lr_ = 1e-3, step_size_ = 2000, rate_ = 1.0;
  bool staircase_ = false;
};

}  // namespace

std::unique_ptr<LrSchedule> make_lr_schedule(const std::optional<config::SchedulerConfig>& config, double base_lr,
                                             double base_momentum, const config::DefaultSchedulePlan& fallback) {
  (void)base_momentum;  // no DeepSpeed schedule starts from the optimizer's momentum
  if (!config && fallback.type == "constant") return std::make_unique<ConstantSchedule>(base_lr);
  if (!config) return std::make_unique<TrainerSchedule>(fallback, base_lr);
  const std::string& type = config->type;
  const SchedulerParams& p = config->params;
  switch (config->kind) {
    case SchedulerKind::warmup_lr:
      return std::make_unique<WarmupSchedule>(type, p, base_lr, false);
    case SchedulerKind::warmup_decay_lr:
      return std::make_unique<WarmupSchedule>(type, p, base_lr, true);
    case SchedulerKind::warmup_cosine_lr:
      return std::make_unique<WarmupCosineSchedule>(type, p, base_lr);
    case SchedulerKind::one_cycle:
      return std::make_unique<OneCycleSchedule>(type, p, base_lr);
    case SchedulerKind::lr_range_test:
      return std::make_unique<LrRangeTestSchedule>(type, p, base_lr);
    default:
      break;
  }
  fail(
      "scheduler type '{}' is a torch.optim.lr_scheduler class, which dscpp does not run; use one of "
      "DeepSpeed's schedules: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest",
      type);
}

}  // namespace dscpp::runtime
