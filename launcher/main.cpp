// `dscpp`: the command users type. This file holds only the CLI (CLI11 is costly to
// compile, so no other file includes it).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/error.h"
#include "launcher/commands.h"

namespace {

void add_fact_flags(CLI::App* cmd, dscpp::config::RunFacts& f) {
  auto group = "Run facts (resolve \"auto\"; unset ones take the HF Trainer's defaults)";
  cmd->add_option("--world_size", f.world_size, "number of ranks (default 1)")->group(group);
  cmd->add_option("--hidden_size", f.hidden_size, "the model's hidden size (for bucket-size autos)")->group(group);
  cmd->add_option("--micro_batch", f.micro_batch, "per-rank micro batch (HF default 8)")->group(group);
  cmd->add_option("--gradient_accumulation_steps", f.gradient_accumulation_steps, "(HF default 1)")->group(group);
  cmd->add_option("--total_steps", f.total_steps, "optimizer steps of the run (for scheduler totals)")->group(group);
  cmd->add_option("--learning_rate", f.learning_rate, "(HF default 5e-5)")->group(group);
  cmd->add_option("--weight_decay", f.weight_decay, "(HF default 0)")->group(group);
  cmd->add_option("--adam_beta1", f.adam_beta1, "(HF default 0.9)")->group(group);
  cmd->add_option("--adam_beta2", f.adam_beta2, "(HF default 0.999)")->group(group);
  cmd->add_option("--adam_epsilon", f.adam_epsilon, "(HF default 1e-8)")->group(group);
  cmd->add_option("--max_grad_norm", f.max_grad_norm, "gradient clipping (HF default 1.0)")->group(group);
  cmd->add_option("--warmup_steps", f.warmup_steps, "(HF default 0)")->group(group);
  cmd->add_option("--warmup_ratio", f.warmup_ratio, "warmup as a fraction of total steps (HF default 0)")->group(group);
  // Flags set the fact only when given: an unset fact must stay unset, or it would
  // contradict every config that enables fp16/bf16 without "auto".
  cmd->add_flag_callback(
         "--fp16", [&f] { f.fp16 = true; }, "fills fp16.enabled: \"auto\"")
      ->group(group);
  cmd->add_flag_callback(
         "--bf16", [&f] { f.bf16 = true; }, "fills bf16.enabled: \"auto\"")
      ->group(group);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dscpp — DeepSpeed's distributed training, native.\n"
      "Reads DeepSpeed JSON configs unchanged. Subcommands:\n"
      "  config check FILE   validate a config, resolve \"auto\", print every effective key and its source\n"
      "  config keys         list every config key dscpp knows, with DeepSpeed's default\n"
      "  report              what this build contains (CUDA, NCCL, gloo, MPI, async I/O) and CPU features",
      "dscpp"};
  app.require_subcommand(1);
  app.set_version_flag("--version", DSCPP_VERSION_STRING);

  CLI::App* config = app.add_subcommand("config", "DeepSpeed config tools");
  config->require_subcommand(1);
  dscpp::launcher::ConfigCheckArgs check;
  CLI::App* check_cmd = config->add_subcommand(
      "check",
      "Validate FILE as DeepSpeed would (strictly: unknown keys are errors, with the closest valid key), resolve\n"
      "\"auto\" values the way the HF Trainer does, and print the effective config with each value's source.\n"
      "Exit status: 0 valid, 1 invalid.");
  check_cmd->add_option("FILE", check.file, "the JSON config (or its URL-safe base64, as DeepSpeed accepts)")
      ->required();
  check_cmd->add_flag("--json", check.json, "print the effective config as JSON instead of a table");
  check_cmd->add_flag("-q,--quiet", check.quiet, "print only problems");
  add_fact_flags(check_cmd, check.facts);
  CLI::App* keys_cmd = config->add_subcommand("keys", "List every config key with DeepSpeed's default");
  CLI::App* report_cmd = app.add_subcommand("report", "Show the engines compiled into this build and CPU features");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*check_cmd) return dscpp::launcher::run_config_check(check);
    if (*keys_cmd) return dscpp::launcher::run_config_keys();
    if (*report_cmd) return dscpp::launcher::run_report();
  } catch (const dscpp::Error& e) {
    std::fprintf(stderr, "dscpp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
