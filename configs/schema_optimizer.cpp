// optimizer and scheduler: the accepted params and their defaults follow the type, as in
// DeepSpeed, which passes `params` as keyword arguments to the chosen class.
#include "configs/ds_config.h"

#include <algorithm>
#include <cctype>

namespace dscpp::config {

namespace {

using K = OptimizerKind;

struct OptimizerInfo {
  OptimizerKind kind;
  const char* name;     // canonical spelling
  bool deepspeed_name;  // matched case-insensitively (DeepSpeed's own); torch.optim names are exact
  bool zero_supported;  // runs under ZeRO without zero_allow_untested_optimizer
  std::vector<const char*> keys;
};

const std::vector<const char*> kAdamKeys = {
    "lr",      "betas",         "eps",        "weight_decay", "bias_correction",
    "amsgrad", "set_grad_none", "torch_adam", "adam_w_mode",  "fp32_optimizer_states"};
const std::vector<const char*> kOneBitKeys = {"lr",      "bias_correction", "betas",
                                              "eps",     "eps_inside_sqrt", "weight_decay",
                                              "amsgrad", "cuda_aware",      "comm_backend_name"};
const std::vector<const char*> kTorchFlags = {"maximize", "foreach", "differentiable", "capturable"};

std::vector<const char*> concat(std::vector<const char*> a, const std::vector<const char*>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<OptimizerInfo>& optimizer_table() {
  static const std::vector<OptimizerInfo> table = {
      {K::adam, "Adam", true, true, kAdamKeys},
      {K::adamw, "AdamW", true, true, kAdamKeys},
      {K::lamb,
       "Lamb",
       true,
       false,
       {"lr", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay", "max_coeff", "min_coeff",
        "amsgrad"}},
      {K::onebit_adam, "OneBitAdam", true, false, concat(kOneBitKeys, {"freeze_step"})},
      {K::zero_one_adam, "ZeroOneAdam", true, false,
       concat(kOneBitKeys, {"var_freeze_step", "var_update_scaler", "local_step_scaler", "local_step_clipper"})},
      {K::onebit_lamb, "OneBitLamb", true, false,
       concat(kOneBitKeys,
              {"freeze_step", "max_coeff", "min_coeff", "coeff_beta", "factor_max", "factor_min", "factor_threshold"})},
      {K::lion, "Lion", true, true, {"lr", "betas", "weight_decay", "set_grad_none", "fp32_optimizer_states"}},
      {K::adagrad, "Adagrad", true, true,
       concat({"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "amsgrad", "fused"}, kTorchFlags)},
      {K::muadam, "MuAdam", true, false, concat({"lr", "betas", "eps", "weight_decay", "amsgrad"}, kTorchFlags)},
      {K::muadamw, "MuAdamW", true, false, concat({"lr", "betas", "eps", "weight_decay", "amsgrad"}, kTorchFlags)},
      {K::musgd, "MuSGD", true, false,
       concat({"lr", "momentum", "dampening", "weight_decay", "nesterov", "fused"}, kTorchFlags)},
      {K::muon,
       "Muon",
       true,
       true,
       {"lr", "momentum", "weight_decay", "nesterov", "ns_steps", "betas", "eps", "muon_lr", "adam_lr", "ns_method",
        "per_head_muon"}},
      {K::sgd, "SGD", false, false,
       concat({"lr", "momentum", "dampening", "weight_decay", "nesterov", "fused"}, kTorchFlags)},
      {K::rmsprop, "RMSprop", false, false,
       concat({"lr", "alpha", "eps", "weight_decay", "momentum", "centered"}, kTorchFlags)},
      {K::adadelta, "Adadelta", false, false, concat({"lr", "rho", "eps", "weight_decay"}, kTorchFlags)},
      {K::adamax, "Adamax", false, false, concat({"lr", "betas", "eps", "weight_decay"}, kTorchFlags)},
      {K::nadam, "NAdam", false, false,
       concat({"lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay"}, kTorchFlags)},
      {K::radam, "RAdam", false, false,
       concat({"lr", "betas", "eps", "weight_decay", "decoupled_weight_decay"}, kTorchFlags)},
      {K::asgd, "ASGD", false, false, concat({"lr", "lambd", "alpha", "t0", "weight_decay"}, kTorchFlags)},
      {K::rprop, "Rprop", false, false, concat({"lr", "etas", "step_sizes"}, kTorchFlags)},
      {K::sparse_adam, "SparseAdam", false, false, {"lr", "betas", "eps", "maximize"}},
  };
  return table;
}

const OptimizerInfo* find_optimizer(const std::string& type) {
  for (const auto& info : optimizer_table()) {
    if (type == info.name) return &info;
    if (info.deepspeed_name && type.size() == std::string_view(info.name).size() &&
        std::equal(type.begin(), type.end(), info.name,
                   [](char a, char b) { return std::tolower((unsigned char)a) == std::tolower((unsigned char)b); }))
      return &info;
  }
  return nullptr;
}

bool canonical_optimizer(std::string& type) {
  const OptimizerInfo* info = find_optimizer(type);
  if (!info) return false;
  type = info->name;
  return true;
}

// torch.optim's (and DeepSpeed's fused kernels') default arguments where they differ from
// the struct's Adam-flavoured defaults.
OptimizerParams optimizer_defaults(OptimizerKind kind) {
  OptimizerParams p;
  switch (kind) {
    case K::adagrad:
      p.lr = 1e-2, p.eps = 1e-10;
      break;
    case K::rmsprop:
      p.lr = 1e-2;
      break;
    case K::adadelta:
      p.lr = 1.0, p.eps = 1e-6;
      break;
    case K::adamax:
    case K::nadam:
      p.lr = 2e-3;
      break;
    case K::asgd:
      p.lr = 1e-2, p.alpha = 0.75;
      break;
    case K::rprop:
      p.lr = 1e-2;
      break;
    case K::muon:
      p.lr = 1e-3, p.momentum = 0.95, p.weight_decay = 0.1, p.nesterov = true;
      break;
    default:
      break;
  }
  return p;
}

void describe_optimizer_params(Visitor& v, OptimizerParams& p, const OptimizerInfo* info) {
  auto has = [&](std::string_view key) {
    return !info || std::find(info->keys.begin(), info->keys.end(), key) != info->keys.end();
  };
  const FieldOpts nonneg{.min = 0};
  if (has("lr")) v.field("lr", p.lr, nonneg);
  if (has("betas")) v.field("betas", p.betas, {.min = 0, .max = 1});
  if (has("eps")) v.field("eps", p.eps, nonneg);
  if (has("weight_decay")) v.field("weight_decay", p.weight_decay, nonneg);
  if (has("bias_correction")) v.field("bias_correction", p.bias_correction);
  if (has("amsgrad")) v.field("amsgrad", p.amsgrad);
  if (has("set_grad_none")) v.field("set_grad_none", p.set_grad_none);
  if (has("torch_adam")) v.field("torch_adam", p.torch_adam);
  if (has("adam_w_mode")) v.field("adam_w_mode", p.adam_w_mode);
  if (has("fp32_optimizer_states")) v.field("fp32_optimizer_states", p.fp32_optimizer_states);
  if (has("eps_inside_sqrt")) v.field("eps_inside_sqrt", p.eps_inside_sqrt);
  if (has("max_coeff")) v.field("max_coeff", p.max_coeff, nonneg);
  if (has("min_coeff")) v.field("min_coeff", p.min_coeff, nonneg);
  if (has("freeze_step")) v.field("freeze_step", p.freeze_step, nonneg);
  if (has("cuda_aware")) v.field("cuda_aware", p.cuda_aware);
  if (has("comm_backend_name"))
    v.field("comm_backend_name", p.comm_backend_name, {.choices = {"nccl", "mpi", "hccl", "compressed"}});
  if (has("var_freeze_step")) v.field("var_freeze_step", p.var_freeze_step, nonneg);
  if (has("var_update_scaler")) v.field("var_update_scaler", p.var_update_scaler, {.min = 1});
  if (has("local_step_scaler")) v.field("local_step_scaler", p.local_step_scaler, {.min = 1});
  if (has("local_step_clipper")) v.field("local_step_clipper", p.local_step_clipper, {.min = 1});
  if (has("coeff_beta")) v.field("coeff_beta", p.coeff_beta, {.min = 0, .max = 1});
  if (has("factor_max")) v.field("factor_max", p.factor_max, nonneg);
  if (has("factor_min")) v.field("factor_min", p.factor_min, nonneg);
  if (has("factor_threshold")) v.field("factor_threshold", p.factor_threshold, nonneg);
  if (has("momentum")) v.field("momentum", p.momentum, nonneg);
  if (has("dampening")) v.field("dampening", p.dampening, nonneg);
  if (has("nesterov")) v.field("nesterov", p.nesterov);
  if (has("maximize")) v.field("maximize", p.maximize);
  if (has("foreach")) v.field("foreach", p.foreach);
  if (has("differentiable")) v.field("differentiable", p.differentiable);
  if (has("capturable")) v.field("capturable", p.capturable);
  if (has("fused")) v.field("fused", p.fused);
  if (has("lr_decay")) v.field("lr_decay", p.lr_decay, nonneg);
  if (has("initial_accumulator_value")) v.field("initial_accumulator_value", p.initial_accumulator_value, nonneg);
  if (has("alpha")) v.field("alpha", p.alpha, nonneg);
  if (has("centered")) v.field("centered", p.centered);
  if (has("rho")) v.field("rho", p.rho, {.min = 0, .max = 1});
  if (has("momentum_decay")) v.field("momentum_decay", p.momentum_decay, nonneg);
  if (has("decoupled_weight_decay")) v.field("decoupled_weight_decay", p.decoupled_weight_decay);
  if (has("lambd")) v.field("lambd", p.lambd, nonneg);
  if (has("t0")) v.field("t0", p.t0, nonneg);
  if (has("etas")) v.field("etas", p.etas, nonneg);
  if (has("step_sizes")) v.field("step_sizes", p.step_sizes, nonneg);
  if (has("ns_steps")) v.field("ns_steps", p.ns_steps, {.min = 1});
  if (has("muon_lr")) v.field("muon_lr", p.muon_lr, nonneg);
  if (has("adam_lr")) v.field("adam_lr", p.adam_lr, nonneg);
  if (has("ns_method")) v.field("ns_method", p.ns_method);
  if (has("per_head_muon")) v.field("per_head_muon", p.per_head_muon);
  // Not an optimizer argument; listed so that its error can point at gradient_clipping.
  v.field("max_grad_norm", p.max_grad_norm);
}

// ---- schedulers ------------------------------------------------------------------------
using S = SchedulerKind;

struct SchedulerInfo {
  SchedulerKind kind;
  const char* name;
  std::vector<const char*> keys;
  std::vector<const char*> required;
};

const std::vector<SchedulerInfo>& scheduler_table() {
  static const std::vector<const char*> warmup = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                                                  "last_batch_iteration"};
  static const std::vector<SchedulerInfo> table = {
      {S::warmup_lr, "WarmupLR", warmup, {}},
      {S::warmup_decay_lr, "WarmupDecayLR", concat(warmup, {"total_num_steps"}), {"total_num_steps"}},
      {S::warmup_cosine_lr,
       "WarmupCosineLR",
       {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
        "last_batch_iteration"},
       {"total_num_steps"}},
      {S::one_cycle,
       "OneCycle",
       {"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size", "cycle_second_step_size",
        "cycle_first_stair_count", "cycle_second_stair_count", "decay_step_size", "cycle_momentum", "cycle_min_mom",
        "cycle_max_mom", "decay_mom_rate", "last_batch_iteration"},
       {"cycle_min_lr", "cycle_max_lr"}},
      {S::lr_range_test,
       "LRRangeTest",
       {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate", "lr_range_test_staircase",
        "last_batch_iteration"},
       {}},
      {S::step_lr, "StepLR", {"step_size", "gamma", "last_epoch"}, {"step_size"}},
      {S::multi_step_lr, "MultiStepLR", {"milestones", "gamma", "last_epoch"}, {"milestones"}},
      {S::exponential_lr, "ExponentialLR", {"gamma", "last_epoch"}, {"gamma"}},
      {S::cosine_annealing_lr, "CosineAnnealingLR", {"T_max", "eta_min", "last_epoch"}, {"T_max"}},
      {S::cosine_annealing_warm_restarts,
       "CosineAnnealingWarmRestarts",
       {"T_0", "T_mult", "eta_min", "last_epoch"},
       {"T_0"}},
      {S::constant_lr, "ConstantLR", {"factor", "total_iters", "last_epoch"}, {}},
      {S::linear_lr, "LinearLR", {"start_factor", "end_factor", "total_iters", "last_epoch"}, {}},
      {S::polynomial_lr, "PolynomialLR", {"total_iters", "power", "last_epoch"}, {}},
      {S::cyclic_lr,
       "CyclicLR",
       {"base_lr", "max_lr", "step_size_up", "step_size_down", "mode", "gamma", "scale_mode", "cycle_momentum",
        "base_momentum", "max_momentum", "last_epoch"},
       {"base_lr", "max_lr"}},
      {S::one_cycle_lr,
       "OneCycleLR",
       {"max_lr", "total_steps", "epochs", "steps_per_epoch", "pct_start", "anneal_strategy", "cycle_momentum",
        "base_momentum", "max_momentum", "div_factor", "final_div_factor", "three_phase", "last_epoch"},
       {"max_lr"}},
      {S::reduce_lr_on_plateau,
       "ReduceLROnPlateau",
       {"mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps"},
       {}},
  };
  return table;
}

const SchedulerInfo* find_scheduler(const std::string& type) {
  for (const auto& info : scheduler_table())
    if (type == info.name) return &info;
  return nullptr;
}

SchedulerParams scheduler_defaults(SchedulerKind kind) {
  SchedulerParams p;
  switch (kind) {
    case S::step_lr:
    case S::multi_step_lr:
      p.gamma = 0.1;
      break;
    case S::cyclic_lr:
      p.gamma = 1.0;
      break;
    case S::constant_lr:
    case S::linear_lr:
    case S::polynomial_lr:
      p.total_iters = 5;
      break;
    case S::one_cycle_lr:
      p.base_momentum = 0.85, p.max_momentum = 0.95;
      break;
    case S::reduce_lr_on_plateau:
      p.mode = "min", p.factor = 0.1;
      break;
    default:
      break;
  }
  return p;
}

void describe_scheduler_params(Visitor& v, SchedulerParams& p, const SchedulerInfo* info) {
  auto has = [&](std::string_view key) {
    return !info || std::find(info->keys.begin(), info->keys.end(), key) != info->keys.end();
  };
  auto opts = [&](std::string_view key, FieldOpts o) {
    o.required = info && std::find(info->required.begin(), info->required.end(), key) != info->required.end();
    return o;
  };
  const FieldOpts nonneg{.min = 0};
  const FieldOpts lrs{.min = 0, .scalar_ok = true};
  if (has("warmup_min_lr")) v.field("warmup_min_lr", p.warmup_min_lr, lrs);
  if (has("warmup_max_lr")) v.field("warmup_max_lr", p.warmup_max_lr, lrs);
  if (has("warmup_num_steps")) v.field("warmup_num_steps", p.warmup_num_steps, nonneg);
  if (has("warmup_type")) v.field("warmup_type", p.warmup_type, {.choices = {"log", "linear"}});
  if (has("total_num_steps")) v.field("total_num_steps", p.total_num_steps, opts("total_num_steps", {.min = 1}));
  if (has("warmup_min_ratio")) v.field("warmup_min_ratio", p.warmup_min_ratio, {.min = 0, .max = 1});
  if (has("cos_min_ratio")) v.field("cos_min_ratio", p.cos_min_ratio, {.min = 0, .max = 1});
  if (has("last_batch_iteration")) v.field("last_batch_iteration", p.last_batch_iteration, {.min = -1});
  if (has("cycle_min_lr")) v.field("cycle_min_lr", p.cycle_min_lr, opts("cycle_min_lr", lrs));
  if (has("cycle_max_lr")) v.field("cycle_max_lr", p.cycle_max_lr, opts("cycle_max_lr", lrs));
  if (has("decay_lr_rate")) v.field("decay_lr_rate", p.decay_lr_rate, nonneg);
  if (has("cycle_first_step_size")) v.field("cycle_first_step_size", p.cycle_first_step_size, {.min = 1});
  if (has("cycle_second_step_size")) v.field("cycle_second_step_size", p.cycle_second_step_size, nonneg);
  if (has("cycle_first_stair_count")) v.field("cycle_first_stair_count", p.cycle_first_stair_count, nonneg);
  if (has("cycle_second_stair_count")) v.field("cycle_second_stair_count", p.cycle_second_stair_count, nonneg);
  if (has("decay_step_size")) v.field("decay_step_size", p.decay_step_size, nonneg);
  if (has("cycle_momentum")) v.field("cycle_momentum", p.cycle_momentum);
  if (has("cycle_min_mom")) v.field("cycle_min_mom", p.cycle_min_mom, {.min = 0, .max = 1});
  if (has("cycle_max_mom")) v.field("cycle_max_mom", p.cycle_max_mom, {.min = 0, .max = 1});
  if (has("decay_mom_rate")) v.field("decay_mom_rate", p.decay_mom_rate, nonneg);
  if (has("lr_range_test_min_lr")) v.field("lr_range_test_min_lr", p.lr_range_test_min_lr, lrs);
  if (has("lr_range_test_step_size")) v.field("lr_range_test_step_size", p.lr_range_test_step_size, {.min = 1});
  if (has("lr_range_test_step_rate")) v.field("lr_range_test_step_rate", p.lr_range_test_step_rate, nonneg);
  if (has("lr_range_test_staircase")) v.field("lr_range_test_staircase", p.lr_range_test_staircase);
  if (has("step_size")) v.field("step_size", p.step_size, opts("step_size", {.min = 1}));
  if (has("milestones")) v.field("milestones", p.milestones, opts("milestones", nonneg));
  if (has("gamma")) v.field("gamma", p.gamma, opts("gamma", nonneg));
  if (has("T_max")) v.field("T_max", p.T_max, opts("T_max", {.min = 1}));
  if (has("T_0")) v.field("T_0", p.T_0, opts("T_0", {.min = 1}));
  if (has("T_mult")) v.field("T_mult", p.T_mult, {.min = 1});
  if (has("eta_min")) v.field("eta_min", p.eta_min, nonneg);
  if (has("factor")) v.field("factor", p.factor, nonneg);
  if (has("total_iters")) v.field("total_iters", p.total_iters, nonneg);
  if (has("start_factor")) v.field("start_factor", p.start_factor, {.min = 0, .max = 1, .min_exclusive = true});
  if (has("end_factor")) v.field("end_factor", p.end_factor, {.min = 0, .max = 1});
  if (has("power")) v.field("power", p.power, nonneg);
  if (has("base_lr")) v.field("base_lr", p.base_lr, opts("base_lr", lrs));
  if (has("max_lr")) v.field("max_lr", p.max_lr, opts("max_lr", lrs));
  if (has("step_size_up")) v.field("step_size_up", p.step_size_up, {.min = 1});
  if (has("step_size_down")) v.field("step_size_down", p.step_size_down, {.min = 1});
  if (has("mode")) {
    if (info && info->kind == S::reduce_lr_on_plateau)
      v.field("mode", p.mode, {.choices = {"min", "max"}});
    else
      v.field("mode", p.mode, {.choices = {"triangular", "triangular2", "exp_range"}});
  }
  if (has("scale_mode")) v.field("scale_mode", p.scale_mode, {.choices = {"cycle", "iterations"}});
  if (has("base_momentum")) v.field("base_momentum", p.base_momentum, nonneg);
  if (has("max_momentum")) v.field("max_momentum", p.max_momentum, nonneg);
  if (has("total_steps")) v.field("total_steps", p.total_steps, {.min = 1});
  if (has("epochs")) v.field("epochs", p.epochs, {.min = 1});
  if (has("steps_per_epoch")) v.field("steps_per_epoch", p.steps_per_epoch, {.min = 1});
  if (has("pct_start")) v.field("pct_start", p.pct_start, {.min = 0, .max = 1});
  if (has("anneal_strategy")) v.field("anneal_strategy", p.anneal_strategy, {.choices = {"cos", "linear"}});
  if (has("div_factor")) v.field("div_factor", p.div_factor, {.min = 0, .min_exclusive = true});
  if (has("final_div_factor")) v.field("final_div_factor", p.final_div_factor, {.min = 0, .min_exclusive = true});
  if (has("three_phase")) v.field("three_phase", p.three_phase);
  if (has("patience")) v.field("patience", p.patience, nonneg);
  if (has("threshold")) v.field("threshold", p.threshold, nonneg);
  if (has("threshold_mode")) v.field("threshold_mode", p.threshold_mode, {.choices = {"rel", "abs"}});
  if (has("cooldown")) v.field("cooldown", p.cooldown, nonneg);
  if (has("min_lr")) v.field("min_lr", p.min_lr, lrs);
  if (has("eps")) v.field("eps", p.eps, nonneg);
  if (has("last_epoch")) v.field("last_epoch", p.last_epoch, {.min = -1});
}

bool canonical_scheduler(std::string& type) {
  return find_scheduler(type) != nullptr;
}

template <typename Table>
std::vector<const char*> names_of(const Table& table) {
  std::vector<const char*> names;
  for (const auto& info : table) names.push_back(info.name);
  return names;
}

}  // namespace

bool OptimizerConfig::decoupled_weight_decay() const {
  return kind == K::adamw || (kind == K::adam && params.adam_w_mode);
}

std::optional<OptimizerKind> optimizer_kind(const std::string& type) {
  const OptimizerInfo* info = find_optimizer(type);
  return info ? std::optional(info->kind) : std::nullopt;
}

std::optional<SchedulerKind> scheduler_kind(const std::string& type) {
  const SchedulerInfo* info = find_scheduler(type);
  return info ? std::optional(info->kind) : std::nullopt;
}

std::vector<std::string> optimizer_type_names() {
  std::vector<std::string> out;
  for (const auto& info : optimizer_table()) out.push_back(info.name);
  return out;
}

std::vector<std::string> scheduler_type_names() {
  std::vector<std::string> out;
  for (const auto& info : scheduler_table()) out.push_back(info.name);
  return out;
}

bool zero_supported_optimizer(OptimizerKind kind) {
  for (const auto& info : optimizer_table())
    if (info.kind == kind) return info.zero_supported;
  return false;
}

namespace {

// "type" then "params": the params' keys and defaults follow the type, so the type is read
// first and, when it changes, the params are reset to that type's defaults before reading.
template <typename Config, typename Info, typename Defaults, typename DescribeParams>
void describe_typed(Visitor& v, Config& c, const std::vector<const char*>& names, bool (*canonical)(std::string&),
                    const Info* (*find)(const std::string&), Defaults defaults, DescribeParams describe_params) {
  v.field("type", c.type, {.choices = names, .required = true, .canonical = canonical});
  const Info* info = find(c.type);
  if (info && c.defaults_for_ != c.type) {
    c.kind = info->kind;
    c.params = defaults(info->kind);
    c.defaults_for_ = c.type;
  }
  // With an unknown type (already reported) the params cannot be checked; keep quiet about them.
  if (info || c.type.empty()) {
    v.section_fn("params", [&](Visitor& pv) { describe_params(pv, c.params, info); });
  } else {
    std::optional<JsonValue> ignored;
    v.field("params", ignored);
  }
}

}  // namespace

void describe(Visitor& v, OptimizerConfig& c) {
  static const std::vector<const char*> names = names_of(optimizer_table());
  describe_typed(v, c, names, canonical_optimizer, find_optimizer, optimizer_defaults, describe_optimizer_params);
  v.field("legacy_fusion", c.legacy_fusion);
}

void describe(Visitor& v, SchedulerConfig& c) {
  static const std::vector<const char*> names = names_of(scheduler_table());
  describe_typed(v, c, names, canonical_scheduler, find_scheduler, scheduler_defaults, describe_scheduler_params);
}

}  // namespace dscpp::config
