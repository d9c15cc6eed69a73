// dscpp-runtime: one rank of a training job. The dscpp launcher starts it for `.so` programs;
// it also runs alone as a single rank.
#include "build_config.h"
#include "collectives/communicator.h"
#include "configs/fact_flags.h"
#include "configs/load.h"
#include "configs/plans.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"
#include "core/rank_discovery.h"
#include "device/device_select.h"
#include "kernels/cpu/ops/cpu_ops.h"
#include "runtime/model/frozen_params.h"
#include "runtime/model/plugin.h"
#include "runtime/rank_device.h"
#include "runtime/tools/describe_model.h"
#include "runtime/tools/generate.h"
#include "runtime/tools/gradcheck.h"
#include "runtime/tools/zero_generate.h"
#include "runtime/train/engine.h"
#include "runtime/train/fault_injection.h"
#include "runtime/train/sampler.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

using namespace dscpp;

namespace {

struct Args {
  std::string model, config;
  config::RunFacts facts;  // the HF Trainer's training arguments; world size and steps are filled in
  std::optional<int64_t> steps;
  std::optional<double> epochs;
  std::string save_dir, load_dir, load_tag, init_from, comm_backend;
  bool no_load_optimizer_states = false, no_load_lr_scheduler_states = false, load_module_only = false;
  int64_t save_interval = 0, eval_interval = 0;
  uint64_t seed = 42;
  int threads = 0;
  int local_rank = -1;
  std::string device_memory_limit;
  std::string device = "auto";
  bool check_schedule = false;
  bool no_shuffle = false, no_eval = false, deepspeed = false, describe_model = false, eval_only = false;
  bool accept_data_change = false, gradcheck = false, generate = false, check_decode = false;
  std::string prompt, prompt_ids, prompts, tokenizer;
  runtime::FreezeOptions freeze;
  int64_t max_new_tokens = 32, top_k = 0, gen_batch_size = 0;
  int num_beams = 1;
  double length_penalty = 1.0;
  bool early_stopping = false, predict_with_generate = false;
  int generation_num_beams = 1;
  int64_t generation_max_length = 0;
  double temperature = 0;
  std::vector<std::string> plugin_args;
};

void plugin_log(void*, const char* message) { log::info("{}", message); }

// The table lists every key of the schema; at start-up only what the config (or "auto", or a
// derivation) set is worth a screen. `dscpp config check FILE` prints the whole table.
std::string non_default_rows(const std::string& table) {
  std::string out;
  size_t defaults = 0, pos = 0;
  while (pos < table.size()) {
    size_t end = table.find('\n', pos);
    if (end == std::string::npos) end = table.size();
    std::string_view line(table.data() + pos, end - pos);
    if (line.size() >= 7 && line.substr(line.size() - 7) == "default")
      ++defaults;
    else if (!line.empty())
      out.append(line).push_back('\n');
    pos = end + 1;
  }
  return out + fmt::format("({} more keys at DeepSpeed's defaults; `dscpp config check FILE` lists them)", defaults);
}

// --generate's options from the command line (the single-rank tool and ZeRO-Inference share them).
runtime::GenerateOptions generate_options(const Args& a) {
  runtime::GenerateOptions g;
  g.load_dir = a.load_dir;
  g.prompt = a.prompt;
  g.prompts_file = a.prompts;
  g.tokenizer = a.tokenizer;
  // "1,2,3" or, for an encoder-decoder, several sources "1,2;3,4".
  std::vector<int32_t>* ids = &g.prompt_ids;
  for (size_t at = 0; at < a.prompt_ids.size();) {
    const size_t end = std::min(a.prompt_ids.find(',', at), a.prompt_ids.find(';', at));
    const std::string id = a.prompt_ids.substr(at, end == std::string::npos ? std::string::npos : end - at);
    char* stop = nullptr;
    const long v = std::strtol(id.c_str(), &stop, 10);
    if (id.empty() || *stop != '\0' || v < 0 || v > INT32_MAX)
      fail("--prompt_ids {}: '{}' is not a token id (comma-separated whole numbers, ';' between prompts)",
           a.prompt_ids, id);
    ids->push_back(static_cast<int32_t>(v));
    if (end != std::string::npos && a.prompt_ids[end] == ';') ids = &g.more_prompt_ids.emplace_back();
    if (end == std::string::npos) break;
    at = end + 1;
  }
  g.max_new_tokens = a.max_new_tokens;
  g.temperature = a.temperature;
  g.top_k = a.top_k;
  g.check_decode = a.check_decode;
  g.num_beams = a.num_beams;
  g.length_penalty = a.length_penalty;
  g.early_stopping = a.early_stopping;
  g.batch_size = a.gen_batch_size;
  g.model = a.model;
  g.plugin_args = a.plugin_args;
  g.seed = a.seed;
  return g;
}

int run(const Args& a) {
  RankIdentity id = discover_rank().value_or(RankIdentity{});
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  // Under the dscpp launcher every line already carries "[rank R]"; don't say it twice.
  const char* prefixed = knob("DSCPP_PREFIXED_OUTPUT");
  if (prefixed && std::string(prefixed) == "1")
    log::init_logging(-1);
  else
    log::init_logging(id.rank, id.node_count > 1 ? std::string(host) : std::string());

  int threads = a.threads > 0
                    ? a.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, id.local_size));
  kernels::set_cpu_threads(threads);

  // The device choice needs the backend (ranks may share a GPU only over shm, gloo or mpi:
  // device/device_select.h); a misspelt flag is reported as such, not as a device problem.
  if (!a.comm_backend.empty()) comm::parse_backend_choice(a.comm_backend);
  runtime::RankDevice rank_device =
      runtime::make_rank_device(runtime::parse_device_choice(a.device), comm_backend_setting(a.comm_backend));
  Device& device = *rank_device.device;
  const std::string device_name = device.name();

  config::RunFacts facts = a.facts;
  facts.world_size = id.world_size;
  facts.total_steps_flag = "--steps (or --epochs)";
  std::optional<int64_t> steps = a.steps;
  // A first pass reads the precision (the plugin is told its compute dtype) and the batch sizes
  // (a placeholder step count satisfies "auto"); its errors are reported after the second.
  facts.total_steps = steps.value_or(1);
  config::LoadedConfig loaded = config::load_config_file(a.config, facts);
  rank_device.ops.dtype = runtime::compute_dtype_for(
      loaded.ok() ? config::compute_precision(loaded.config) : DType::f32, rank_device.ops_16bit);

  // The plugin before the second pass: with --epochs, the number of optimizer steps (which
  // "auto" in the scheduler may need) follows from its train split and the batch sizes.
  runtime::Plugin plugin(a.model);
  dscpp_host_info host_info{};
  host_info.struct_size = sizeof(host_info);
  host_info.rank = id.rank;
  host_info.world_size = id.world_size;
  host_info.local_rank = id.local_rank;
  host_info.compute_dtype = rank_device.ops.dtype;
  host_info.seed = a.seed;
  host_info.device_name = device_name.c_str();
  host_info.log = plugin_log;
  plugin.create(a.plugin_args, host_info);
  runtime::apply_freeze(plugin, a.freeze);

  // The step count, computed here once: the Engine trains to it (TrainOptions::steps).
  if (!steps && loaded.ok()) {
    const config::BatchPlan batch = config::train_plan(loaded, id.world_size).batch;
    steps = runtime::steps_for_epochs(a.epochs.value_or(1.0), plugin.data().train_size, id.world_size, batch.micro,
                                      batch.gas, batch.drop_last);
  }
  if (steps) {
    facts.total_steps = *steps;
    loaded = config::load_config_file(a.config, facts);
  }
  if (!loaded.ok()) {
    if (id.rank == 0) std::fputs(loaded.diagnostics.format(loaded.file_name).c_str(), stderr);
    // Another rank's failure may stop rank 0 before its list is out: every rank names the errors.
    std::string why = loaded.diagnostics.format(loaded.file_name);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    fail("{}: the config was not accepted{}", a.config, id.rank == 0 ? " (errors above)" : ":\n" + why);
  }
  if (auto unsupported = config::unsupported_features(loaded.config); !unsupported.empty())
    fail("{}: valid for DeepSpeed, but dscpp-runtime does not run: {}", a.config, fmt::join(unsupported, "; "));
  for (const auto& d : loaded.diagnostics.all())
    if (id.rank == 0) log::warn("{}", config::format_diagnostic(d, loaded.file_name));
  for (const auto& m : config::monitors_not_written(loaded.config))
    if (id.rank == 0) log::warn("{}: {}", a.config.size() > 200 ? std::string("the config") : a.config, m);
  // The config's log_level, unless DSCPP_LOG_LEVEL chose one for this run.
  if (const auto& level = loaded.config.log_level; level && !knob("DSCPP_LOG_LEVEL")) {
    std::string l = *level;
    std::ranges::transform(l, l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    log::set_level(l == "debug"     ? log::Level::debug
                   : l == "info"    ? log::Level::info
                   : l == "warning" ? log::Level::warn
                                    : log::Level::error);  // error, critical
  }

  comm::CommOptions copts = comm::comm_options_from_env();
  if (!a.comm_backend.empty()) copts.backend = comm::parse_backend_choice(a.comm_backend);
  if (a.check_schedule) copts.check_schedule = true;
  copts.cuda_device = rank_device.cuda;
  copts.device = rank_device.cuda_index;
  copts.cuda_compute_stream = rank_device.cuda_compute_stream;
  copts.device_identity = rank_device.cuda_bus_id;
  copts.device_memory = rank_device.device.get();
  copts.host_memory = rank_device.host.get();
  comm::World world = comm::create_world(copts);

  config::TrainPlan plan = config::train_plan(loaded, world.world->size());
  if (!a.device_memory_limit.empty()) device.set_limit(parse_bytes(a.device_memory_limit, "--device_memory_limit"));
  const kernels::GemmMath gemm_math = runtime::gemm_math_for(plan.precision.compute);
  if (rank_device.set_gemm_math) rank_device.set_gemm_math(gemm_math);
  const dscpp_ops& ops = rank_device.ops;
  if (id.rank == 0) {
    if (rank_device.set_gemm_math)
      log::info("GEMMs: {}", gemm_math == kernels::GemmMath::fp32 ? std::string("exact fp32")
                             : ops.dtype != DSCPP_F32
                                 ? fmt::format("{} tensor cores (16-bit operands, fp32 accumulation)",
                                               kernels::gemm_math_name(gemm_math))
                                 : fmt::format("{} tensor cores (operands cast to {}, fp32 accumulation)",
                                               kernels::gemm_math_name(gemm_math), kernels::gemm_math_name(gemm_math)));
    else if (gemm_math != kernels::GemmMath::fp32)
      log::info("GEMMs: exact fp32 (the CPU ops table has no reduced-precision GEMMs; {} applies on a GPU)",
                kernels::gemm_math_name(gemm_math));
    if (plan.precision.compute != DType::f32)
      log::info("layers compute in {}{}", dtype_name(runtime::dtype_of(ops.dtype)),
                ops.dtype != DSCPP_F32 ? " (activations and the GEMMs' operands and results 16-bit, fp32 arithmetic)"
                : rank_device.ops_16bit ? " over 16-bit parameters (DSCPP_COMPUTE_DTYPE=fp32)"
                                        : " over 16-bit parameters (the CPU ops table computes in fp32)");
    log::info("dscpp-runtime {}: {} rank{} ({}), comm {}, device {}, {} thread{} per rank, {}", DSCPP_VERSION,
              id.world_size, id.world_size == 1 ? "" : "s", id.source.empty() ? "single process" : id.source,
              world.description, device.name(), threads, threads == 1 ? "" : "s", kernels::blas_description());
    log::info("effective config ({}):\n{}", loaded.file_name,
              non_default_rows(config::format_effective_config_table(loaded)));
  }

  runtime::TrainOptions o;
  o.steps = steps;
  o.save_dir = a.save_dir;
  o.save_interval = a.save_interval;
  o.load_dir = a.load_dir;
  o.load_tag = a.load_tag;
  o.resume.optimizer_states = !a.no_load_optimizer_states;
  o.resume.lr_scheduler_states = !a.no_load_lr_scheduler_states;
  o.resume.module_only = a.load_module_only;
  o.eval_interval = a.eval_interval;
  o.eval = !a.no_eval;
  o.generation.enabled = a.predict_with_generate;
  o.generation.num_beams = a.generation_num_beams;
  o.generation.max_new_tokens = a.generation_max_length;
  o.generation.tokenizer = a.tokenizer;
  o.accept_data_change = a.accept_data_change;
  o.seed = a.seed;
  o.init_from = a.init_from;
  o.shuffle = !a.no_shuffle;
  o.eval_only = a.eval_only || a.generate;  // ZeRO-Inference: forward only
  if (world.node_count * world.local_size == id.world_size) o.ranks_per_node = world.local_size;
  if (const char* r = knob("DSCPP_RESTART_COUNT")) o.resume_from_save_dir = std::atoi(r) > 0;
  runtime::Engine engine(plugin, std::move(plan), *world.world, device, ops, o, rank_device.host.get());
  if (a.generate) {
    const int rc = runtime::run_zero_generate(generate_options(a), plugin, device, engine.prepare_inference());
    engine.finish_inference();
    return rc;
  }
  engine.run();
  if (id.rank == 0 && rank_device.ops_scratch_peak)
    log::info("ops table scratch peak per rank (bytes): {} (device memory outside the peak above: GEMM operands cast "
              "to 16 bits, attention's blocks of scores, cuDNN's and cuBLASLt's buffers)",
              rank_device.ops_scratch_peak());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "dscpp-runtime: one rank of a dscpp training job. Loads a model plugin (.so built against "
      "include/dscpp/model.h) and trains it with a DeepSpeed JSON config. Rank, world size and the rendezvous "
      "address come from the environment the launcher sets (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, OMPI_*, "
      "SLURM_*, PMI_*); without them it runs as a single rank. Arguments after `--` go to the plugin.",
      "dscpp-runtime"};
  app.add_option("--model", a.model, "model plugin (.so)")->required()->check(CLI::ExistingFile);
  // Required unless --describe_model (checked after parsing).
  app.add_option("--deepspeed_config", a.config, "DeepSpeed JSON config (file or base64)");
  app.add_flag("--describe_model", a.describe_model,
               "print the plugin's parameter counts as one JSON line and exit (used by `dscpp estimate --model`)");
  app.add_flag("--gradcheck", a.gradcheck,
               "check the plugin's backward against finite differences of its loss for every parameter, on one "
               "micro-batch, print a verdict and exit (needs no config; `dscpp gradcheck` runs this)");
  app.add_flag("--generate", a.generate,
               "sample a continuation of --prompt/--prompt_ids from the weights of --load_dir (or the plugin's "
               "init_from), one token at a time through the plugin's decode calls with their caches, print it and "
               "exit (needs no config; `dscpp generate` runs this)");
  app.add_option("--prompt", a.prompt,
                 "with --generate: a text, encoded by the model's tokenizer (tokenizer.json beside --from_hf's "
                 "config.json, or --tokenizer), else as byte tokens (a byte-level model)");
  app.add_option("--prompts", a.prompts, "with --generate: a file of prompts, one per line, each continued in turn");
  app.add_option("--tokenizer", a.tokenizer,
                 "with --generate: a Hugging Face tokenizer directory (default: the --from_hf directory's, if any)");
  app.add_option("--prompt_ids", a.prompt_ids,
                 "with --generate: token ids, e.g. 128000,791,6864; several prompts separated by ';'");
  app.add_option("--max_new_tokens", a.max_new_tokens, "with --generate: tokens to add (default 32)");
  app.add_option("--temperature", a.temperature,
                 "with --generate: 0 = greedy (default), else sample softmax(logits/T)");
  app.add_option("--top_k", a.top_k, "with --generate and a temperature: sample among the k likeliest (0 = all)");
  app.add_flag("--check_decode", a.check_decode,
               "with --generate: also run the training forward at every step and fail unless its logits match");
  app.add_option("--num_beams", a.num_beams,
                 "with --generate, an encoder-decoder: beam search with this many beams (default 1: greedy), as "
                 "transformers' generate runs it");
  app.add_option("--length_penalty", a.length_penalty,
                 "with --num_beams: a hypothesis scores its log-probability over length^this (default 1)");
  app.add_flag("--early_stopping", a.early_stopping,
               "with --num_beams: stop a prompt once it has num_beams finished hypotheses");
  app.add_option("--batch_size", a.gen_batch_size,
                 "with --generate: prompts decoded together (default: 8 for an encoder-decoder and with a config; "
                 "a decoder without one streams each prompt alone; above 1 a decoder decodes greedily)");
  app.add_flag("--deepspeed", a.deepspeed, "accepted for DeepSpeed compatibility (no effect)");
  auto* steps = app.add_option("--steps", a.steps, "train until this many optimizer steps (global_steps)");
  app.add_option("--epochs", a.epochs, "train for this many passes over the train split (default 1)")->excludes(steps);
  app.add_option("--save_dir", a.save_dir, "write checkpoints here (at --save_interval and at the end)");
  app.add_option("--save_interval", a.save_interval, "steps between checkpoints (0: only at the end)");
  auto* load_dir = app.add_option("--load_dir", a.load_dir, "resume from the checkpoint <load_dir>/latest names");
  app.add_option("--load_tag", a.load_tag, "with --load_dir: resume from <load_dir>/TAG (e.g. global_step100) instead")
      ->needs(load_dir);
  app.add_flag("--no_load_optimizer_states", a.no_load_optimizer_states,
               "with --load_dir: fresh optimizer state and loss scaler, fp32 master from the 16-bit weights")
      ->needs(load_dir);
  app.add_flag("--no_load_lr_scheduler_states", a.no_load_lr_scheduler_states,
               "with --load_dir: the LR schedule starts from its first step (the step counters still resume)")
      ->needs(load_dir);
  app.add_flag("--load_module_only", a.load_module_only,
               "with --load_dir: the weights only; optimizer, loss scaler, LR schedule and step counters start fresh")
      ->needs(load_dir);
  app.add_flag("--accept_data_change", a.accept_data_change,
               "resume even though the plugin's data differs from the checkpoint's (split sizes, sample shapes or "
               "the SHA-256 of 64 samples spread over the train split); without it such a resume is refused");
  app.add_option("--eval_interval", a.eval_interval,
                 "steps between evaluations on the eval split (0: only at the end)");
  auto* no_eval = app.add_flag("--no_eval", a.no_eval, "skip the final evaluation");
  app.add_flag("--predict_with_generate", a.predict_with_generate,
               "an encoder-decoder's evaluations also generate for every eval source and print the corpus BLEU of "
               "the outputs against the labels (sacreBLEU's, both decoded by --tokenizer or the --from_hf directory's "
               "tokenizer) and their mean length, as run_translation's predict_with_generate");
  app.add_option("--generation_num_beams", a.generation_num_beams, "with --predict_with_generate: beams (default 1)");
  app.add_option(
      "--generation_max_length", a.generation_max_length,
      "with --predict_with_generate: tokens to generate at most (default: the plugin's --max_target_length)");
  app.add_flag("--eval_only", a.eval_only,
               "ZeRO-Inference: evaluate the eval split forward-only with the weights from --load_dir or --init_from "
               "and exit; no gradients or optimizer state are allocated (the config needs no optimizer). With "
               "zero_optimization stage 3 and offload_param cpu|nvme the device holds only the layers in use, so "
               "a model larger than --device_memory_limit evaluates")
      ->excludes(no_eval);
  app.add_option("--seed", a.seed, "seed of parameter init and data shuffling (default 42)");
  app.add_option("--init_from", a.init_from, "start from the weights in this safetensors file");
  app.add_option("--freeze", a.freeze.freeze,
                 "do not train the parameters whose full names match this glob (`*` crosses dots, e.g. "
                 "'model.embed_tokens.*'; repeatable): no gradient, optimizer state or gradient traffic, still "
                 "partitioned and gathered at ZeRO stage 3, saved in checkpoints")
      ->allow_extra_args(false);
  app.add_option("--train_only", a.freeze.train_only,
                 "train only the parameters whose full names match this glob (repeatable); every other one is "
                 "frozen as --freeze freezes it")
      ->allow_extra_args(false);
  app.add_flag("--no_shuffle", a.no_shuffle, "take training samples in order (every epoch)");
  app.add_option("--comm_backend", a.comm_backend,
                 "shm|gloo|mpi|nccl|hierarchical (default: chosen per job, nccl on GPUs; also DSCPP_COMM_BACKEND). "
                 "nccl needs a GPU per rank; over shm, gloo or mpi more ranks than GPUs share them "
                 "(LOCAL_RANK mod the visible GPUs)");
  app.add_option("--device", a.device,
                 "where the rank trains: cuda (the GPU LOCAL_RANK selects among the visible ones; NCCL between "
                 "ranks), cpu, or cuda-sim (the CUDA code path run on the CPU, for testing without a GPU: slow, "
                 "checks every buffer handed to a kernel is device memory). auto: cuda when this build has CUDA and "
                 "a GPU is visible, else cpu. On cuda, GEMMs are exact fp32 unless the config enables bf16 or "
                 "fp16: then they run on that type's tensor-core math (fp32 accumulation); DSCPP_GEMM_MATH="
                 "fp32|tf32|bf16|fp16 overrides")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "cuda-sim"}));
  app.add_option("--device_memory_limit", a.device_memory_limit,
                 "cap this rank's device memory (e.g. 2GiB): the CPU device then fails like a GPU of that size, "
                 "with advice on the ZeRO stage or offload that would fit");
  app.add_flag("--check_schedule", a.check_schedule,
               "debug: check before every collective that all ranks issue the same one, and fail with the first "
               "divergence instead of hanging");
  app.add_option("--threads", a.threads, "CPU threads per rank (default: cores / ranks on this host)");
  app.add_option("--local_rank", a.local_rank, "set by launchers; the environment is authoritative");
  app.add_option("plugin_args", a.plugin_args, "arguments for the plugin (after --)");
  config::add_fact_flags(&app, a.facts, true);
  app.positionals_at_end();
  try {
    app.parse(argc, argv);
    if (!a.describe_model && !a.gradcheck && !a.generate && a.config.empty())
      throw CLI::RequiredError("--deepspeed_config");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (a.describe_model) return runtime::run_describe_model(a.model, a.plugin_args, a.freeze);
    // The single-rank tools: what they share from the command line (auto device: the CPU).
    auto tool = [&](auto& g) {
      log::init_logging(-1);
      if (a.threads > 0) kernels::set_cpu_threads(a.threads);
      g.model = a.model;
      g.plugin_args = a.plugin_args;
      g.device = a.device == "auto" ? "cpu" : a.device;
      g.seed = a.seed;
    };
    if (a.gradcheck) {
      runtime::GradcheckOptions g;
      tool(g);
      return runtime::run_gradcheck(g);
    }
    if (a.generate && a.config.empty()) {
      runtime::GenerateOptions g = generate_options(a);
      tool(g);
      return runtime::run_generate(g);
    }
    return run(a);
  } catch (const PeerFailure& e) {  // another rank's failure: the launcher blames that one
    log::error("{} (this rank stopped because another failed)", e.what());
    return kExitPeerFailed;
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    if (runtime::slow_exit_injected()) std::this_thread::sleep_for(std::chrono::seconds(1));
    return 1;
  }
}
