#include "configs/resolve.h"

#include <fmt/core.h>

#include <cmath>

namespace dscpp::config {
namespace {

bool given(const LoadedConfig& c, const std::string& path) {
  return c.origins.count(path) > 0;
}

Location where(const LoadedConfig& c, const std::string& path) {
  auto it = c.origins.find(path);
  return it == c.origins.end() ? Location{} : it->second.loc;
}

// The HF Trainer's get_warmup_steps: --warmup_steps when positive, else ceil(ratio × total);
// nullopt when the ratio needs a total nobody gave.
struct Warmup {
  i64 steps = 0;
  std::string how;
};
std::optional<Warmup> warmup_steps(const RunFacts& f) {
  const i64 steps = f.warmup_steps.value_or(0);
  const double ratio = f.warmup_ratio.value_or(0.0);
  if (steps > 0 || ratio == 0) return Warmup{steps, "warmup steps"};
  if (!f.total_steps) return std::nullopt;
  return Warmup{static_cast<i64>(std::ceil(ratio * static_cast<double>(*f.total_steps))),
                fmt::format("ceil(warmup_ratio {} × {} steps)", ratio, *f.total_steps)};
}

void mark(LoadedConfig& c, const std::string& path, Origin::Source source, std::string detail) {
  Location loc = where(c, path);
  c.origins[path] = Origin{source, loc, std::move(detail)};
}

// Deprecated flag `old_key` (true) stands for `replacement`; both given is DeepSpeed's
// "Cannot provide deprecated parameter ... and replacing parameter ... together".
bool deprecated_conflict(LoadedConfig& c, const std::string& old_path, const std::string& new_path) {
  if (!given(c, old_path) || !given(c, new_path)) return false;
  c.diagnostics.error(
      old_path, where(c, old_path),
      fmt::format("deprecated key given together with its replacement {}; keep only {}", new_path, new_path));
  return true;
}

// With elasticity on, DeepSpeed's elastic solver chooses the batch triple; giving the keys
// as well is an error unless ignore_non_elastic_batch_info says to drop them.
bool batch_from_elasticity(LoadedConfig& c) {
  const auto& e = c.config.checked_only.elasticity;
  if (!e.enabled) return false;
  bool any = given(c, "train_batch_size") || given(c, "train_micro_batch_size_per_gpu") ||
             given(c, "gradient_accumulation_steps");
  if (any && !e.ignore_non_elastic_batch_info) {
    c.diagnostics.error("elasticity", where(c, "elasticity"),
                        "elasticity is enabled, so the elastic solver sets train_batch_size, "
                        "train_micro_batch_size_per_gpu and gradient_accumulation_steps; remove them or set "
                        "elasticity.ignore_non_elastic_batch_info to true");
  }
  return true;
}

}  // namespace

void apply_deprecations(LoadedConfig& c) {
  ZeroConfig& z = c.config.zero_optimization;
  const std::string zp = "zero_optimization.";
  if (!deprecated_conflict(c, zp + "cpu_offload", zp + "offload_optimizer") && z.cpu_offload.value_or(false)) {
    z.offload_optimizer.emplace();
    z.offload_optimizer->device = "cpu";
    mark(c, zp + "offload_optimizer.device", Origin::Source::deprecated_key, "from cpu_offload: true");
  }
  if (!deprecated_conflict(c, zp + "cpu_offload_param", zp + "offload_param") && z.cpu_offload_param.value_or(false)) {
    z.offload_param.emplace();
    z.offload_param->device = "cpu";
    mark(c, zp + "offload_param.device", Origin::Source::deprecated_key, "from cpu_offload_param: true");
  }
  if (!deprecated_conflict(c, zp + "stage3_gather_fp16_weights_on_model_save",
                           zp + "stage3_gather_16bit_weights_on_model_save") &&
      z.gather_fp16_weights_on_model_save) {
    z.gather_16bit_weights_on_model_save = *z.gather_fp16_weights_on_model_save;
    mark(c, zp + "stage3_gather_16bit_weights_on_model_save", Origin::Source::deprecated_key,
         "from stage3_gather_fp16_weights_on_model_save");
  }
}

void resolve_autos(LoadedConfig& c, const std::vector<PendingAuto>& autos, const RunFacts& f) {
  DsConfig& cfg = c.config;
  const i64 world = f.world_size.value_or(1);
  const double lr = f.learning_rate.value_or(5e-5);
  auto auto_at = [&](const std::string& path) {
    for (const auto& a : autos)
      if (a.path == path) return true;
    return false;
  };
  // The micro batch and accumulation the triple uses, whether auto or given.
  if (auto_at("train_micro_batch_size_per_gpu")) cfg.train_micro_batch_size_per_gpu = f.micro_batch.value_or(8);
  if (auto_at("gradient_accumulation_steps"))
    cfg.gradient_accumulation_steps = f.gradient_accumulation_steps.value_or(1);

  for (const auto& a : autos) {
    const std::string& p = a.path;
    auto resolved = [&](std::string detail) {
      c.origins[p] = Origin{Origin::Source::auto_resolved, a.loc, std::move(detail)};
    };
    auto need = [&](const std::string& what, const std::string& flag) {
      c.diagnostics.error(p, a.loc, fmt::format("\"auto\" needs {}; pass {}", what, flag));
    };
    auto hidden = [&]() -> std::optional<i64> {
      if (!f.hidden_size) need("the model's hidden size", f.hidden_size_flag);
      return f.hidden_size;
    };
    OptimizerParams* op = cfg.optimizer ? &cfg.optimizer->params : nullptr;
    SchedulerParams* sp = cfg.scheduler ? &cfg.scheduler->params : nullptr;
    const bool stage3 = cfg.zero_optimization.stage == 3;

    if (p == "train_micro_batch_size_per_gpu") {
      resolved(
          fmt::format("micro batch {}{}", *cfg.train_micro_batch_size_per_gpu, f.micro_batch ? "" : " (HF default)"));
    } else if (p == "gradient_accumulation_steps") {
      resolved(fmt::format("gradient accumulation {}{}", *cfg.gradient_accumulation_steps,
                           f.gradient_accumulation_steps ? "" : " (HF default)"));
    } else if (p == "train_batch_size") {
      i64 mbs = cfg.train_micro_batch_size_per_gpu.value_or(f.micro_batch.value_or(8));
      i64 gas = cfg.gradient_accumulation_steps.value_or(f.gradient_accumulation_steps.value_or(1));
      cfg.train_batch_size = world * mbs * gas;
      resolved(fmt::format("world_size × micro batch × accumulation = {} × {} × {}", world, mbs, gas));
    } else if (p == "gradient_clipping") {
      cfg.gradient_clipping = f.max_grad_norm.value_or(1.0);
      resolved(f.max_grad_norm ? "max grad norm" : "max grad norm (HF default 1.0)");
    } else if (p == "optimizer.params.lr" && op) {
      op->lr = lr;
      resolved(f.learning_rate ? "learning rate" : "learning rate (HF default 5e-5)");
    } else if (p == "optimizer.params.betas" && op) {
      op->betas = {f.adam_beta1.value_or(0.9), f.adam_beta2.value_or(0.999)};
      resolved("[adam_beta1, adam_beta2]");
    } else if (p == "optimizer.params.eps" && op) {
      op->eps = f.adam_epsilon.value_or(1e-8);
      resolved("adam epsilon");
    } else if (p == "optimizer.params.weight_decay" && op) {
      op->weight_decay = f.weight_decay.value_or(0.0);
      resolved("weight decay");
    } else if (p == "scheduler.params.warmup_min_lr" && sp) {
      sp->warmup_min_lr = {0.0};
      resolved("0, as the HF Trainer fills it");
    } else if (p == "scheduler.params.warmup_max_lr" && sp) {
      sp->warmup_max_lr = {lr};
      resolved("learning rate");
    } else if (p == "scheduler.params.total_num_steps" && sp) {
      if (!f.total_steps)
        need("the number of optimizer steps of the run", f.total_steps_flag);
      else
        sp->total_num_steps = *f.total_steps, resolved("optimizer steps of the run");
    } else if (p == "scheduler.params.warmup_num_steps" && sp) {
      if (auto w = warmup_steps(f)) {
        sp->warmup_num_steps = w->steps;
        resolved(w->how);
      } else {
        need("the number of optimizer steps (warmup is a ratio of it)", f.total_steps_flag);
      }
    } else if (p == "fp16.enabled") {
      cfg.fp16.enabled = f.fp16.value_or(false);
      resolved("--fp16");
    } else if (p == "bf16.enabled") {
      cfg.bf16.enabled = f.bf16.value_or(false);
      resolved("--bf16");
    } else if (p == "amp.enabled") {
      cfg.amp.enabled = false;
      resolved("off: apex amp is only chosen by the HF Trainer's apex backend");
    } else if (p == "amp.opt_level") {
      cfg.amp.opt_level = "O1";
      resolved("fp16_opt_level (HF default O1)");
    } else if (p == "zero_optimization.reduce_bucket_size") {
      if (auto h = hidden())
        cfg.zero_optimization.reduce_bucket_size = *h * *h, resolved(fmt::format("hidden² = {}²", *h));
    } else if (p == "zero_optimization.stage3_prefetch_bucket_size" && stage3) {
      // Integer arithmetic: 0.9·h² as a float is what broke DeepSpeed ≥ 0.15.
      if (auto h = hidden()) {
        cfg.zero_optimization.prefetch_bucket_size = (*h * *h * 9) / 10;
        resolved(fmt::format("0.9 × hidden² = int(0.9 × {}²)", *h));
      }
    } else if (p == "zero_optimization.stage3_param_persistence_threshold" && stage3) {
      if (auto h = hidden())
        cfg.zero_optimization.param_persistence_threshold = 10 * *h, resolved(fmt::format("10 × hidden = 10 × {}", *h));
    } else if (p == "zero_optimization.stage") {
      cfg.zero_optimization.stage = 2;
      resolved("2, Accelerate's default zero_stage");
    } else if (p == "zero_optimization.offload_optimizer.device" || p == "zero_optimization.offload_param.device") {
      resolved("none, Accelerate's default");  // the field already holds "none"
    } else if (p == "zero_optimization.offload_optimizer.nvme_path" ||
               p == "zero_optimization.offload_param.nvme_path") {
      resolved("none, Accelerate's default");
    } else if (p == "zero_optimization.stage3_gather_16bit_weights_on_model_save") {
      cfg.zero_optimization.gather_16bit_weights_on_model_save = false;
      resolved("false, Accelerate's default");
    } else if (a.strict_section) {
      // DeepSpeed's pydantic blocks drop "auto" values and use the default.
      c.origins[p] = Origin{Origin::Source::auto_default, a.loc, "DeepSpeed's default (no run fact resolves it)"};
    } else {
      c.diagnostics.error(p, a.loc,
                          "\"auto\" cannot be resolved for this key (no run fact determines it, and DeepSpeed "
                          "would keep the string); give a value");
    }
  }

  // Non-auto values that contradict an explicitly given fact (HF's "mismatch" error).
  auto mismatch = [&](const std::string& path, double config_value, std::optional<double> fact, const char* flag) {
    if (!fact || !given(c, path) || c.origins[path].source != Origin::Source::file) return;
    if (std::fabs(config_value - *fact) <= 1e-12 * std::max(1.0, std::fabs(*fact))) return;
    c.diagnostics.error(
        path, where(c, path),
        fmt::format("the config says {} but {} says {}; make them agree or write \"auto\"", config_value, flag, *fact));
  };
  auto as_double = [](std::optional<i64> v) {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  auto as_bool = [](std::optional<bool> v) { return v ? std::optional<double>(*v ? 1.0 : 0.0) : std::nullopt; };
  if (cfg.train_micro_batch_size_per_gpu)
    mismatch("train_micro_batch_size_per_gpu", static_cast<double>(*cfg.train_micro_batch_size_per_gpu),
             as_double(f.micro_batch), "--micro_batch");
  if (cfg.gradient_accumulation_steps)
    mismatch("gradient_accumulation_steps", static_cast<double>(*cfg.gradient_accumulation_steps),
             as_double(f.gradient_accumulation_steps), "--gradient_accumulation_steps");
  mismatch("gradient_clipping", cfg.gradient_clipping, f.max_grad_norm, "--max_grad_norm");
  mismatch("fp16.enabled", cfg.fp16.enabled ? 1 : 0, as_bool(f.fp16), "--fp16");
  mismatch("bf16.enabled", cfg.bf16.enabled ? 1 : 0, as_bool(f.bf16), "--bf16");
  if (cfg.optimizer) {
    const OptimizerParams& op = cfg.optimizer->params;
    mismatch("optimizer.params.lr", op.lr, f.learning_rate, "--learning_rate");
    mismatch("optimizer.params.weight_decay", op.weight_decay, f.weight_decay, "--weight_decay");
    mismatch("optimizer.params.eps", op.eps, f.adam_epsilon, "--adam_epsilon");
    if (op.betas.size() == 2) {
      mismatch("optimizer.params.betas", op.betas[0], f.adam_beta1, "--adam_beta1");
      mismatch("optimizer.params.betas", op.betas[1], f.adam_beta2, "--adam_beta2");
    }
  }
  if (cfg.scheduler) {
    const SchedulerParams& sp = cfg.scheduler->params;
    if (sp.warmup_max_lr.size() == 1)
      mismatch("scheduler.params.warmup_max_lr", sp.warmup_max_lr[0], f.learning_rate, "--learning_rate");
    if (sp.total_num_steps)
      mismatch("scheduler.params.total_num_steps", static_cast<double>(*sp.total_num_steps), as_double(f.total_steps),
               f.total_steps_flag.c_str());
    mismatch("scheduler.params.warmup_num_steps", static_cast<double>(sp.warmup_num_steps), as_double(f.warmup_steps),
             "--warmup_steps");
  }
}

void supply_trainer_defaults(LoadedConfig& c, const RunFacts& f) {
  DscppConfig& d = c.config.dscpp;
  const bool filled = !c.config.optimizer;
  if (filled && !given(c, "dscpp.no_weight_decay")) {
    d.no_weight_decay = {"bias", "norm"};
    mark(c, "dscpp.no_weight_decay", Origin::Source::auto_resolved,
         "no optimizer block: biases and norms without weight decay, as the HF Trainer groups them");
  }
  if (c.config.scheduler) {
    if (d.lr_scheduler_type)
      c.diagnostics.error("dscpp.lr_scheduler_type", where(c, "dscpp.lr_scheduler_type"),
                          "names the schedule for a config without a \"scheduler\" block, but this one has it; "
                          "keep one of the two");
  } else {
    if (f.lr_scheduler_type && d.lr_scheduler_type && *f.lr_scheduler_type != *d.lr_scheduler_type)
      c.diagnostics.error("dscpp.lr_scheduler_type", where(c, "dscpp.lr_scheduler_type"),
                          fmt::format("the config says \"{}\" but --lr_scheduler_type says \"{}\"; make them agree",
                                      *d.lr_scheduler_type, *f.lr_scheduler_type));
    if (!d.lr_scheduler_type && f.lr_scheduler_type) {
      d.lr_scheduler_type = f.lr_scheduler_type;
      mark(c, "dscpp.lr_scheduler_type", Origin::Source::auto_resolved, "--lr_scheduler_type");
    } else if (!d.lr_scheduler_type && filled) {
      d.lr_scheduler_type = "linear";
      mark(c, "dscpp.lr_scheduler_type", Origin::Source::auto_resolved,
           "no optimizer or scheduler block: the HF Trainer's default schedule");
    }
    if (d.lr_scheduler_type && *d.lr_scheduler_type != "constant") {
      d.total_steps_ = f.total_steps.value_or(0);
      if (auto w = warmup_steps(f)) d.warmup_steps_ = w->steps;
    }
  }
  if (!filled) return;
  OptimizerConfig& o = c.config.optimizer.emplace();
  o.type = "AdamW";
  o.kind = OptimizerKind::adamw;
  o.defaults_for_ = o.type;
  o.params.lr = f.learning_rate.value_or(5e-5);
  o.params.betas = {f.adam_beta1.value_or(0.9), f.adam_beta2.value_or(0.999)};
  o.params.eps = f.adam_epsilon.value_or(1e-8);
  o.params.weight_decay = f.weight_decay.value_or(0.0);
  const char* why = "no optimizer block: AdamW from the training arguments, as the HF Trainer builds it";
  for (const char* key : {"optimizer.type", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
                          "optimizer.params.weight_decay"})
    c.origins[key] = Origin{Origin::Source::auto_resolved, {}, why};
}

void resolve_batch_sizes(LoadedConfig& c, const RunFacts& f) {
  DsConfig& cfg = c.config;
  if (batch_from_elasticity(c)) return;
  i64 world = f.world_size.value_or(1);
  std::string world_source = f.world_size ? "--world_size" : "default world size 1";
  i64 dp = world;
  std::string dp_text = fmt::format("data-parallel size {} ({})", dp, world_source);
  if (cfg.sequence_parallel_size && *cfg.sequence_parallel_size > 1) {
    i64 sp = *cfg.sequence_parallel_size;
    if (world % sp != 0) {
      c.diagnostics.error("sequence_parallel_size", where(c, "sequence_parallel_size"),
                          fmt::format("world size {} is not divisible by sequence_parallel_size {}", world, sp));
      return;
    }
    dp = world / sp;
    dp_text = fmt::format("data-parallel size {} (world {} / sequence_parallel_size {})", dp, world, sp);
  }
  auto& tbs = cfg.train_batch_size;
  auto& mbs = cfg.train_micro_batch_size_per_gpu;
  auto& gas = cfg.gradient_accumulation_steps;
  auto derived = [&](const char* path, std::string formula) {
    mark(c, path, Origin::Source::derived, std::move(formula));
  };
  if (!tbs && !mbs) {
    c.diagnostics.error("train_batch_size", {},
                        "either train_batch_size or train_micro_batch_size_per_gpu must be given (DeepSpeed derives "
                        "the rest of the triple from them)");
    return;
  }
  if (tbs && mbs && !gas) {
    gas = *tbs / *mbs / dp;
    derived("gradient_accumulation_steps",
            fmt::format("train_batch_size // micro // dp = {} // {} // {}", *tbs, *mbs, dp));
  } else if (tbs && gas && !mbs) {
    mbs = *tbs / dp / *gas;
    derived("train_micro_batch_size_per_gpu",
            fmt::format("train_batch_size // dp // accumulation = {} // {} // {}", *tbs, dp, *gas));
  } else if (mbs && gas && !tbs) {
    tbs = *mbs * *gas * dp;
    derived("train_batch_size", fmt::format("micro × accumulation × dp = {} × {} × {}", *mbs, *gas, dp));
  } else if (tbs && !mbs && !gas) {
    gas = 1;
    mbs = *tbs / dp;
    derived("gradient_accumulation_steps", "1 (only train_batch_size given)");
    derived("train_micro_batch_size_per_gpu", fmt::format("train_batch_size // dp = {} // {}", *tbs, dp));
  } else if (mbs && !tbs && !gas) {
    gas = 1;
    tbs = *mbs * dp;
    derived("gradient_accumulation_steps", "1 (only the micro batch given)");
    derived("train_batch_size", fmt::format("micro × dp = {} × {}", *mbs, dp));
  }
  auto source = [&](const char* path) {
    auto it = c.origins.find(path);
    if (it == c.origins.end()) return std::string("default");
    return describe_origin(it->second);
  };
  if (*tbs > 0 && *mbs > 0 && *gas > 0 && *tbs == *mbs * *gas * dp) return;
  std::string message = fmt::format(
      "train_batch_size must equal train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size, "
      "but {} ({}) != {} ({}) × {} ({}) × {}",
      *tbs, source("train_batch_size"), *mbs, source("train_micro_batch_size_per_gpu"), *gas,
      source("gradient_accumulation_steps"), dp_text);
  if (*mbs > 0 && *gas > 0) {
    message +=
        fmt::format("; consistent choices: train_batch_size {} (keeping micro and accumulation)", *mbs * *gas * dp);
    if (*tbs > 0 && *tbs % (*mbs * dp) == 0)
      message += fmt::format(", or gradient_accumulation_steps {} (keeping train_batch_size)", *tbs / (*mbs * dp));
    else if (*tbs > 0 && *tbs % (*gas * dp) == 0)
      message += fmt::format(", or train_micro_batch_size_per_gpu {} (keeping train_batch_size)", *tbs / (*gas * dp));
  }
  if (*tbs <= 0 || *mbs <= 0 || *gas <= 0)
    message += "; every value must be at least 1 (train_batch_size smaller than the data-parallel size derives 0)";
  c.diagnostics.error("train_batch_size", where(c, "train_batch_size"), message);
}

}  // namespace dscpp::config
