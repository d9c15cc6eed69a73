// The command-line flags that supply RunFacts (configs/load.h), shared by `dscpp config check` and
// dscpp-runtime so that both spell and explain them alike. A template over the CLI library's
// App type: this header needs no CLI include, and only the two programs' main files, which
// include CLI11 anyway, instantiate it.
#pragma once

#include "configs/load.h"
#include "configs/schema.h"

#include <string>
#include <vector>

namespace dscpp::config {

// `known_by_caller`: the caller knows the world size and the step count itself (dscpp-runtime),
// so those two flags are left out.
template <typename App>
void add_fact_flags(App* cmd, RunFacts& f, bool known_by_caller) {
  const char* group = "Run facts (resolve \"auto\" and the HF Trainer's defaults; unset ones take the HF Trainer's)";
  if (!known_by_caller) {
    cmd->add_option("--world_size", f.world_size, "number of ranks (default 1)")->group(group);
    cmd->add_option("--total_steps", f.total_steps, "optimizer steps of the run (for scheduler totals)")->group(group);
  }
  cmd->add_option("--hidden_size", f.hidden_size, "the model's hidden size (for bucket-size autos)")->group(group);
  cmd->add_option("--micro_batch", f.micro_batch, "per-rank micro batch (HF default 8)")->group(group);
  cmd->add_option("--gradient_accumulation_steps", f.gradient_accumulation_steps, "(HF default 1)")->group(group);
  cmd->add_option("--learning_rate", f.learning_rate, "(HF default 5e-5)")->group(group);
  cmd->add_option("--weight_decay", f.weight_decay,
                  "(HF default 0; without an optimizer block biases and norms take none)")
      ->group(group);
  cmd->add_option("--adam_beta1", f.adam_beta1, "(HF default 0.9)")->group(group);
  cmd->add_option("--adam_beta2", f.adam_beta2, "(HF default 0.999)")->group(group);
  cmd->add_option("--adam_epsilon", f.adam_epsilon, "(HF default 1e-8)")->group(group);
  cmd->add_option("--max_grad_norm", f.max_grad_norm, "gradient clipping (HF default 1.0)")->group(group);
  cmd->add_option("--warmup_steps", f.warmup_steps, "(HF default 0)")->group(group);
  cmd->add_option("--warmup_ratio", f.warmup_ratio, "warmup as a fraction of total steps (HF default 0)")->group(group);
  std::string types;
  for (const char* t : kDefaultScheduleTypes) types += (types.empty() ? "" : ", ") + std::string(t);
  cmd->add_option("--lr_scheduler_type", f.lr_scheduler_type,
                  "the schedule without a scheduler block: " + types +
                      " (default: linear without an optimizer block, as the HF Trainer; else constant)")
      ->check([](const std::string& v) -> std::string {
        for (const char* t : kDefaultScheduleTypes)
          if (v == t) return {};
        std::string list;
        for (const char* t : kDefaultScheduleTypes) list += (list.empty() ? "" : ", ") + std::string(t);
        return "--lr_scheduler_type " + v + ": dscpp runs " + list;
      })
      ->group(group);
  // Flags set the fact only when given: an unset fact must stay unset, or it would
  // contradict every config that enables fp16/bf16 without "auto".
  cmd->add_flag_callback("--fp16", [&f] { f.fp16 = true; }, "fills fp16.enabled: \"auto\"")->group(group);
  cmd->add_flag_callback("--bf16", [&f] { f.bf16 = true; }, "fills bf16.enabled: \"auto\"")->group(group);
}

}  // namespace dscpp::config
