// `dscpp`: the command users type. This file holds only the CLI (CLI11 is costly to
// compile, so no other file includes it).
#include "configs/fact_flags.h"
#include "core/error.h"
#include "launcher/accelerate/settings.h"
#include "launcher/commands/commands.h"
#include "launcher/job_commands.h"
#include "launcher/launch.h"
#include "launcher/supervisor/node_agent.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

namespace {

// `accelerate launch`'s flags, each as --name and --na-me as Accelerate spells them, collected
// by name for launcher/accelerate/ to type and apply.
void add_accelerate_flags(CLI::App& app, std::map<std::string, std::string>& flags, const char* group,
                          const std::vector<std::string>& skip) {
  for (const auto& spec : dscpp::launcher::accelerate::flag_specs()) {
    const std::string name = spec.name;
    if (std::ranges::find(skip, name) != skip.end()) continue;
    std::string dashed = name;
    std::ranges::replace(dashed, '_', '-');
    const std::string names = "--" + name + (dashed == name ? "" : ",--" + dashed);
    if (spec.takes_value)
      app.add_option_function<std::string>(
             names, [&flags, name](const std::string& v) { flags[name] = v; }, spec.help)
          ->group(group);
    else
      app.add_flag_callback(
             names, [&flags, name] { flags[name] = "true"; }, spec.help)
          ->group(group);
  }
}

void add_launch_flags(CLI::App& app, dscpp::launcher::LaunchArgs& a) {
  const char* res = "Resources (hostfile > SLURM allocation > this machine)";
  app.add_option("-H,--hostfile", a.hostfile, "DeepSpeed/MPI hostfile: lines \"HOST slots=N\" (default /job/hostfile)")
      ->group(res)
      ->each([&a](const std::string&) { a.hostfile_given = true; });
  app.add_option("-i,--include", a.include, "use only these: HOST[:SLOT,...][@HOST...]; a bare HOST = all its slots")
      ->group(res);
  app.add_option("-e,--exclude", a.exclude, "leave out these, same syntax as --include")->group(res);
  app.add_option("--num_nodes", a.num_nodes, "use the first N hosts")->group(res);
  app.add_option("--num_gpus,--num_accelerators", a.num_gpus, "use GPUs 0..N-1 on every host")->group(res);
  app.add_option("--num_procs", a.num_procs, "CPU ranks on this machine when it has no GPUs (default 1)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(res);
  const char* run = "Running";
  app.add_option("--launcher", a.launcher, "local | ssh | openmpi | slurm (default: local for one host, slurm "
                                           "inside an allocation, else ssh)")
      ->group(run);
  app.add_option("--launcher_args", a.launcher_args, "extra arguments for mpirun/srun, split like a shell")->group(run);
  app.add_option("--master_addr", a.master_addr, "rank 0's address (default: the first host's, as this host sees it)")
      ->group(run);
  app.add_option("--master_port", a.master_port,
                 "rank 0's rendezvous port (default 29500, or on one host the next free one when "
                 "another job holds it; a given port must be free)")
      ->check(CLI::Range(1, 65535))
      ->group(run)
      ->each([&a](const std::string&) { a.master_port_given = true; });
  // Each --ssh_* flag given overrides user@host and ~/.ssh/config, as ssh's own options do.
  app.add_option("--ssh_port", a.ssh_port, "sshd port on every host (default: Port in the ssh config, else 22)")
      ->check(CLI::Range(1, 65535))
      ->group(run);
  app.add_option("--ssh_user", a.ssh_user, "log in as USER on every host (default: user@ of the host entry, User in "
                                           "the ssh config, else $USER)")
      ->type_name("USER")
      ->group(run);
  app.add_option("--ssh_identity", a.ssh_identity,
                 "private key to log in with (repeatable; tried after ssh-agent, before IdentityFile; default: "
                 "IdentityFile, else ~/.ssh/id_{ed25519,ecdsa,rsa})")
      ->type_name("FILE")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(run);
  app.add_option("--ssh_known_hosts", a.ssh_known_hosts,
                 "host keys to trust (default: UserKnownHostsFile, else ~/.ssh/known_hosts; plus "
                 "/etc/ssh/ssh_known_hosts)")
      ->type_name("FILE")
      ->group(run);
  app.add_option("--ssh_config", a.ssh_config,
                 "OpenSSH client config for the logins: HostName, User, Port, IdentityFile, ProxyJump, ... "
                 "(default ~/.ssh/config; none = read none)")
      ->type_name("FILE")
      ->group(run);
  app.add_flag("--no_ssh_check", a.no_ssh_check,
               "skip the check each host's session makes before its ranks start (same dscpp build, same "
               "dscpp-runtime and program files, master port free)")
      ->group(run);
  app.add_flag("--force_multi", a.force_multi, "use the multi-host runner even for a single host")->group(run);
  app.add_flag("--no_local_rank", a.no_local_rank, "do not append --local_rank=N to the program's arguments")
      ->group(run);
  app.add_flag("--bind_cores_to_rank", a.bind_cores_to_rank, "pin each rank to its share of the cores; sets "
                                                            "OMP_NUM_THREADS")
      ->group(run);
  app.add_option("--bind_core_list", a.bind_core_list, "cores to share out, e.g. 0,2-5 (default: all)")->group(run);
  app.add_option("--enable_each_rank_log", a.each_rank_log_dir, "write each rank's output to DIR/<time>_rank<R>.log")
      ->group(run);
  app.add_flag("--save_pid", a.save_pid, "write the launcher's pid to /tmp/<pid>.deepspeed")->group(run);
  app.add_option("--max_restarts", a.max_restarts,
                 "when a rank fails, restart the whole job up to K times (default 0; ranks see "
                 "DSCPP_RESTART_COUNT)")
      ->group(run)
      ->type_name("K");
  // One value per --env, so that `--env A=1 ./program` leaves the program alone.
  app.add_option("--env", a.env, "K=V for every rank (repeatable; overrides exported variables and env files)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(run);
  app.add_flag("--dry_run", a.dry_run, "print the plan, the exact commands and each host's environment; start nothing")
      ->group(run);
  app.add_flag("--no_ssh", a.no_ssh, "start only this machine's ranks (with --node_rank), as DeepSpeed's --no_ssh")
      ->group(run);
  app.add_option("--node_rank", a.node_rank, "with --no_ssh: which node of the hostfile this machine is")
      ->check(CLI::NonNegativeNumber)
      ->group(run);
  const char* acc = "Accelerate (a config file from `accelerate config` and `accelerate launch`'s flags)";
  app.add_option("--config_file", a.accelerate_config_file,
                 "Accelerate's config file (YAML): launch and DeepSpeed settings; flags below override it. Any flag "
                 "below without it reads $HF_HOME/accelerate/default_config.yaml when that exists")
      ->type_name("CFG.yaml")
      ->group(acc);
  add_accelerate_flags(app, a.accelerate_flags, acc, {});
}

}  // namespace

// The internal subcommands take argv as it is: the per-host agent the ssh runner starts, and
// the per-task shim mpirun/srun start. Users never type them.
int run_internal(const std::string& command, std::vector<std::string> args) {
  if (command == "node-agent")
    return dscpp::launcher::run_node_agent(dscpp::launcher::parse_node_agent_argv(args));
  int local_rank_at = -1;
  bool stop_on_stdin = false, stop_on_usr1 = false;
  while (!args.empty() && args.front() != "--" && args.front().rfind("--", 0) == 0) {
    if (args.front().rfind("--local_rank_at=", 0) == 0)
      local_rank_at = std::stoi(args.front().substr(16));
    else if (args.front() == "--stop_on_stdin")
      stop_on_stdin = true;
    else if (args.front() == "--stop_on_usr1")
      stop_on_usr1 = true;
    else
      throw dscpp::Error("unknown argument '" + args.front() +
                         "'; expected --local_rank_at=I, --stop_on_stdin, --stop_on_usr1, --");
    args.erase(args.begin());
  }
  if (!args.empty() && args.front() == "--") args.erase(args.begin());
  return dscpp::launcher::run_rank_shim(args, local_rank_at, stop_on_stdin, stop_on_usr1);
}

int main(int argc, char** argv) {
  // Other hosts are given dscpp's path as the user typed it (job_commands.h says why).
  if (argc >= 1) dscpp::launcher::set_invoked_as(argv[0]);
  if (argc >= 2 && (std::string(argv[1]) == "node-agent" || std::string(argv[1]) == "rank-shim")) {
    try {
      return run_internal(argv[1], std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dscpp %s: error: %s\n", argv[1], e.what());
      return 1;
    }
  }
  // `dscpp gradcheck|generate PLUGIN.so [runtime options] [-- plugin args]`: the runtime's tools.
  if (argc >= 2 && (std::string(argv[1]) == "gradcheck" || std::string(argv[1]) == "generate")) {
    try {
      dscpp::launcher::run_runtime_tool(argv[1], std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dscpp %s: error: %s\n", argv[1], e.what());
      return 1;
    }
  }
  // Every argument after `aio-bench` is the benchmark's (its --help included).
  if (argc >= 2 && std::string(argv[1]) == "aio-bench") {
    try {
      dscpp::launcher::run_aio_bench(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dscpp aio-bench: error: %s\n", e.what());
      return 1;
    }
  }
  CLI::App app{
      "dscpp — DeepSpeed's distributed training, native.\n\n"
      "  dscpp [options] PROGRAM [ARGS...]   start PROGRAM once per rank, like `deepspeed`\n"
      "      PROGRAM is a model plugin (*.so, run by dscpp-runtime) or any executable;\n"
      "      everything after PROGRAM (or after --) goes to it unchanged.\n"
      "  dscpp --config_file CFG.yaml [accelerate launch flags] PROGRAM [ARGS...]\n"
      "      the same from Accelerate's config file and flags (docs/accelerate.md)\n"
      "  dscpp config check FILE             validate a DeepSpeed config, resolve \"auto\", print every key\n"
      "  dscpp config check --config_file CFG.yaml  the DeepSpeed config an Accelerate config file derives\n"
      "  dscpp config keys                   list every config key dscpp knows, with DeepSpeed's default\n"
      "  dscpp report                        what this build and this machine offer\n"
      "  dscpp estimate --stage 2|3 ...      DeepSpeed's ZeRO memory estimates for a model\n"
      "  dscpp zero-to-fp32 CKPT OUT         a checkpoint of any ZeRO stage → one fp32 safetensors file\n"
      "  dscpp export-hf CKPT OUT_DIR        a checkpoint → a Hugging Face model directory (config + safetensors)\n"
      "      --merge folds its LoRA adapter into the weights; --adapter writes PEFT's adapter directory alone\n"
      "  dscpp tokenize --tokenizer DIR ...  encode/decode with a Hugging Face tokenizer.json, as transformers does\n"
      "  dscpp bleu REF... [-i HYP]          corpus BLEU (and chrF) of hypotheses, one a line, as sacrebleu scores it\n"
      "  dscpp gradcheck PLUGIN.so [-- ARGS] a plugin's backward against finite differences, with a verdict\n"
      "  dscpp generate PLUGIN.so --prompt T  sample a continuation, token by token with a KV cache\n"
      "  dscpp aio-bench --path DIR          sweep NVMe offload's aio settings on DIR: GB/s vs fio, best `aio` block\n",
      "dscpp"};
  app.set_version_flag("--version", DSCPP_VERSION_STRING);
  app.prefix_command();  // the first positional ends dscpp's options: the rest is PROGRAM's

  dscpp::launcher::LaunchArgs launch;
  add_launch_flags(app, launch);

  CLI::App* config = app.add_subcommand("config", "DeepSpeed config tools");
  config->require_subcommand(1);
  dscpp::launcher::ConfigCheckArgs check;
  CLI::App* check_cmd = config->add_subcommand(
      "check",
      "Validate FILE as DeepSpeed would (strictly: unknown keys are errors, with the closest valid key), resolve\n"
      "\"auto\" values the way the HF Trainer does, and print the effective config with each value's source.\n"
      "Exit status: 0 valid, 1 invalid.");
  check_cmd->add_option("FILE", check.file, "the JSON config (or its URL-safe base64, as DeepSpeed accepts)");
  const char* check_acc = "Accelerate (instead of FILE: the DeepSpeed config an Accelerate launch derives)";
  check_cmd->add_option("--config_file", check.accelerate_config_file, "Accelerate's config file (YAML)")
      ->type_name("CFG.yaml")
      ->group(check_acc);
  // --gradient_accumulation_steps is the run-fact flag below; with --config_file it is Accelerate's.
  add_accelerate_flags(*check_cmd, check.accelerate_flags, check_acc, {"gradient_accumulation_steps"});
  check_cmd->add_flag("--json", check.json, "print the effective config as JSON instead of a table");
  check_cmd->add_flag("-q,--quiet", check.quiet, "print only problems");
  dscpp::config::add_fact_flags(check_cmd, check.facts, false);
  CLI::App* keys_cmd = config->add_subcommand("keys", "List every config key with DeepSpeed's default");
  CLI::App* report_cmd = app.add_subcommand("report", "Show what this build and this machine offer");
  dscpp::launcher::EstimateArgs estimate;
  CLI::App* estimate_cmd = app.add_subcommand(
      "estimate",
      "Print DeepSpeed's memory estimates for ZeRO-2 or ZeRO-3 (estimate_zero{2,3}_model_states_mem_needs_all_cold):\n"
      "model states (params, gradients, optimizer) per GPU and per node for each offload option. Give the counts\n"
      "(--total_params, and --largest_layer_params for stage 3) or --model M.so [-- plugin args] to read them.");
  estimate_cmd->add_option("--stage", estimate.stage, "ZeRO stage: 2 or 3")->required();
  estimate_cmd->add_option("--total_params", estimate.total_params, "the model's parameter count (e.g. 2851e6)");
  estimate_cmd->add_option("--largest_layer_params", estimate.largest_layer_params,
                           "parameters of the largest layer (stage 3)");
  estimate_cmd->add_option("--num_gpus_per_node", estimate.num_gpus_per_node, "(default 1)");
  estimate_cmd->add_option("--num_nodes", estimate.num_nodes, "(default 1)");
  estimate_cmd->add_option("--additional_buffer_factor", estimate.additional_buffer_factor,
                           "CPU-side safety factor (default 1.5)");
  estimate_cmd->add_option("--model", estimate.model, "a model plugin (.so): read both counts from it");
  estimate_cmd->add_option("--freeze", estimate.freeze, "with --model: parameters frozen as dscpp-runtime's --freeze")
      ->allow_extra_args(false);
  estimate_cmd->add_option("--train_only", estimate.train_only, "with --model: as dscpp-runtime's --train_only")
      ->allow_extra_args(false);
  estimate_cmd->add_option("plugin_args", estimate.plugin_args, "the plugin's arguments (after --)");
  estimate_cmd->positionals_at_end();

  dscpp::launcher::ZeroToFp32Args z2f;
  CLI::App* z2f_cmd = app.add_subcommand(
      "zero-to-fp32",
      "Write the fp32 weights of a dscpp checkpoint (any ZeRO stage, any number of ranks) into one safetensors\n"
      "file by parameter name, as DeepSpeed's zero_to_fp32.py does, frozen parameters (requires_grad=False)\n"
      "included, widened to fp32; streams tensor by tensor (about 16 MB of memory whatever the model size). No GPU\n"
      "and no runtime needed.");
  z2f_cmd->add_option("CKPT", z2f.checkpoint, "a save directory (follows its `latest`) or a tag directory")->required();
  z2f_cmd->add_option("OUT", z2f.out, "the .safetensors file to write (via OUT.partial, renamed when complete)")
      ->required();
  z2f_cmd->add_option("--state", z2f.state,
                      "write this optimizer state (exp_avg, exp_avg_sq, ...) by parameter name instead of the weights "
                      "(frozen parameters have none and are left out)");
  z2f_cmd->add_option("--progress_interval", z2f.progress_interval, "seconds between progress lines (default 2)");
  z2f_cmd->add_flag("-q,--quiet", z2f.quiet, "no progress lines");

  dscpp::launcher::ExportHfArgs ehf;
  CLI::App* ehf_cmd = app.add_subcommand(
      "export-hf",
      "Write a dscpp checkpoint (any ZeRO stage, any number of ranks) as a Hugging Face model directory that\n"
      "transformers loads: config.json (saved with the checkpoint by the model families of models/) and\n"
      "model.safetensors, sharded with model.safetensors.index.json above --max_shard_size; parameters in\n"
      "Hugging Face's names and layouts, frozen ones included. Streams tensor by tensor. No GPU and no runtime\n"
      "needed. A checkpoint trained with a LoRA adapter exports merged into the model (--merge: W += s · B·A,\n"
      "s = lora_alpha/r, or lora_alpha/√r with use_rslora, from its adapter_config.json, as PEFT's\n"
      "merge_and_unload) or as PEFT's adapter directory alone (--adapter); without either, its adapter matrices\n"
      "are written under their own names.");
  ehf_cmd->add_option("CKPT", ehf.checkpoint, "a save directory (follows its `latest`) or a tag directory")->required();
  ehf_cmd->add_option("OUT_DIR", ehf.out_dir, "the directory to write (created if needed)")->required();
  ehf_cmd->add_option("--dtype", ehf.dtype, "fp32 (default), bf16 or fp16");
  ehf_cmd->add_option("--max_shard_size", ehf.max_shard_size, "largest shard, e.g. 5GB (default), 500MB");
  CLI::Option* ehf_config = ehf_cmd->add_option("--config", ehf.config,
                                                "a config.json to write instead of the one saved with the checkpoint");
  CLI::Option* ehf_merge = ehf_cmd->add_flag(
      "--merge", ehf.merge, "fold each LoRA pair into its base weight, in fp32; no adapter matrices written");
  CLI::Option* ehf_adapter = ehf_cmd->add_flag(
      "--adapter", ehf.adapter,
      "only PEFT's adapter directory: adapter_config.json, adapter_model.safetensors (base_model.model.<name>)");
  ehf_adapter->excludes(ehf_merge)->excludes(ehf_config);
  ehf_cmd->add_option("--base", ehf.base, "with --adapter: the base_model_name_or_path to write in adapter_config.json")
      ->type_name("NAME")
      ->needs(ehf_adapter);
  ehf_cmd->add_option("--progress_interval", ehf.progress_interval, "seconds between progress lines (default 2)");
  ehf_cmd->add_flag("-q,--quiet", ehf.quiet, "no progress lines");

  dscpp::launcher::TokenizeArgs tokenize;
  CLI::App* tok_cmd = app.add_subcommand(
      "tokenize",
      "Encode or decode text with a Hugging Face tokenizer directory (its tokenizer.json), giving the ids\n"
      "transformers' AutoTokenizer gives. No Python needed.");
  tok_cmd
      ->add_option("--tokenizer", tokenize.tokenizer,
                   "a directory with tokenizer.json (a model directory), or the file")
      ->required();
  tok_cmd->add_option("--encode", tokenize.encode, "text to encode: prints its ids as a JSON array");
  tok_cmd->add_option("--decode", tokenize.decode, "ids to decode, 1,2,3 or [1,2,3]: prints the text");
  tok_cmd->add_option("--encode_lines", tokenize.encode_lines,
                      "a file of JSON string literals, one per line: prints one JSON array of ids per line");
  tok_cmd->add_option("--decode_lines", tokenize.decode_lines,
                      "a file of JSON arrays of ids, one per line: prints one JSON string per line");
  tok_cmd->add_flag("--add_special_tokens", tokenize.add_special_tokens,
                    "add what the post-processor adds (BOS/EOS, CLS/SEP), as encode(..., add_special_tokens=True)");
  tok_cmd->add_flag("--skip_special_tokens", tokenize.skip_special_tokens, "leave special tokens out of decoded text");
  tok_cmd->add_option("--input", tokenize.input,
                      "text files to turn into a token file (one document per file; .gz read too)");
  tok_cmd->add_option("--output", tokenize.output, "PREFIX of the token file: PREFIX.bin (and PREFIX.idx)");
  tok_cmd->add_option("--format", tokenize.format,
                      "megatron (default: PREFIX.bin + PREFIX.idx, document boundaries kept) or llmc (llm.c's .bin)");
  tok_cmd->add_flag("--lines", tokenize.lines, "one document per line instead of per file");
  tok_cmd->add_option("--json_key", tokenize.json_key, "JSON lines input: each line's KEY string is a document");
  tok_cmd->add_option("--eod", tokenize.eod,
                      "the token appended to each document (default: the tokenizer's eos_token)");
  tok_cmd->add_option("--threads", tokenize.threads, "encoding threads (default: all; the output is the same for any)");

  dscpp::launcher::BleuArgs bleu;
  CLI::App* bleu_cmd = app.add_subcommand(
      "bleu",
      "Score hypotheses (one per line) against references as the sacrebleu command does (sacreBLEU 2.x's defaults:\n"
      "13a tokenization, exp smoothing, mixed case) and print its line, e.g.\n"
      "BLEU = 34.21 65.1/40.2/28.3/20.0 (BP = 0.950 ratio = 0.951 hyp_len = 1234 ref_len = 1298).\n"
      "Several reference files give several references per segment. Files may be gzip-compressed.");
  bleu_cmd->add_option("REF_FILE", bleu.references, "reference files, one segment per line, as many lines as HYP")
      ->required();
  bleu_cmd->add_option("-i,--input", bleu.input, "the hypotheses, one per line (default: stdin)")->type_name("HYP");
  bleu_cmd->add_option("-m,--metrics", bleu.metrics, "bleu (default), chrf, or both")->expected(1, 2);
  bleu_cmd->add_flag("--lowercase", bleu.lowercase, "case-insensitive BLEU (Python's str.lower() on both sides)");
  bleu_cmd->add_option("--tokenize", bleu.tokenize, "13a (default: mteval-v13a's) or none (split at whitespace)");
  bleu_cmd->add_option("-s,--smooth-method", bleu.smooth_method, "exp (default), none, floor or add-k");
  bleu_cmd->add_option("--smooth-value", bleu.smooth_value, "the value of floor (default 0.1) or add-k (default 1)");
  bleu_cmd->add_option("--chrf-word-order", bleu.chrf_word_order, "word n-gram order of chrF (2: chrF++; default 0)");
  bleu_cmd->add_flag("--chrf-lowercase", bleu.chrf_lowercase, "case-insensitive chrF");
  bleu_cmd->add_flag("-b,--score-only", bleu.score_only, "print only the score");
  bleu_cmd->add_option("-w,--width", bleu.width, "decimals of the score (default 2)")->check(CLI::Range(0, 17));
  bleu_cmd->add_flag("--sentence-level", bleu.sentence_level,
                     "a score per segment instead of the corpus's (BLEU over the n-gram orders each reaches)");
  bleu_cmd->add_flag("--json", bleu.json,
                     "one JSON object per score: the score, precisions, BP, ratio, lengths and n-gram counts at full "
                     "precision, and the line");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*check_cmd) return dscpp::launcher::run_config_check(check);
    if (*keys_cmd) return dscpp::launcher::run_config_keys();
    if (*report_cmd) return dscpp::launcher::run_report();
    if (*estimate_cmd) return dscpp::launcher::run_estimate(estimate);
    if (*tok_cmd) return dscpp::launcher::run_tokenize(tokenize);
    if (*bleu_cmd) return dscpp::launcher::run_bleu(bleu);
    if (*z2f_cmd) return dscpp::launcher::run_zero_to_fp32(z2f);
    if (*ehf_cmd) return dscpp::launcher::run_export_hf(ehf);
    launch.program = app.remaining();
    if (!launch.program.empty() && launch.program.front() == "--") launch.program.erase(launch.program.begin());
    if (launch.program.empty()) {
      std::fputs(app.help().c_str(), stdout);
      std::fputs("\ndscpp: error: no PROGRAM given (try `dscpp --num_procs 2 -- hostname`)\n", stderr);
      return 2;
    }
    return dscpp::launcher::run_launch(launch);
  } catch (const dscpp::Error& e) {
    std::fprintf(stderr, "dscpp: error: %s\n", e.what());
    return 1;
  }
}
