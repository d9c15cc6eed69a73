// The training engine: one rank's step loop around a model plugin.
//
// Per step (DeepSpeed's protocol):
//   for each of the GAS micro-batches: forward → loss → backward with d(loss) = 1/GAS
//   reduce gradients over the world → global-norm clip → optimizer step on the owned
//   partition → publish updated parameters → schedule step
// The ZeRO stage decides only where things live, through three parts that share one flat
// layout (runtime/model/flat_layout.h): ParamStore (whole or partitioned parameters, stage-3
// gathers), GradReducer (allreduce or reduce-scatter, when) and MasterWeights (the fp32
// weights this rank updates and the optimizer over them; offload_optimizer moves them, or with
// ratio < 1 the first sub-groups of them, to the host or NVMe: runtime/offload/optimizer_offload.h).
// The Engine builds the parts from the plan and runs the loop; the policies live beside it:
// GradGuard (overflow, norm, clipping, non-finite steps), RunMemory (the memory plan and the
// out-of-memory advice), StepLog (what the run prints), ForwardPasses (evaluation, the report).
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/model/plugin.h"
#include "runtime/observe/flops_profiler.h"
#include "runtime/observe/memory_plan.h"
#include "runtime/observe/step_log.h"
#include "runtime/observe/train_log.h"
#include "runtime/optim/grad_guard.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/plans.h"
#include "runtime/train/batch_loader.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/forward_passes.h"
#include "runtime/train/generation.h"
#include "runtime/train/layer_runner.h"
#include "runtime/train/run_memory.h"
#include "runtime/zero/zero_state.h"

#include <memory>
#include <optional>
#include <string>

namespace dscpp::runtime {

struct TrainOptions {
  std::optional<int64_t> steps;   // optimizer steps to reach (global_steps; set once the Engine exists), or
  std::optional<double> epochs;   // passes over the train split; default 1 epoch
  std::string save_dir;
  int64_t save_interval = 0;      // steps; 0 = only at the end (when save_dir is set)
  std::string load_dir;           // resume from <load_dir>/latest
  std::string load_tag;           // resume from <load_dir>/<load_tag> instead ("" = what `latest` names)
  ResumeParts resume;             // what a resume takes from the checkpoint (checkpoint.h)
  bool resume_from_save_dir = false;  // restarted job: resume from <save_dir>/latest if any
  int64_t eval_interval = 0;      // steps; 0 = only at the end
  bool eval = true;               // evaluate at the end (when the model has an eval split)
  uint64_t seed = 42;
  std::string init_from;          // safetensors with initial weights
  bool shuffle = true;
  // ZeRO-Inference: evaluate the eval split forward-only (weights from load_dir or init_from),
  // with no gradients, no optimizer state and no training.
  bool eval_only = false;
  // Ranks per node when every node holds the same number (else 0): ZeRO++ qgZ's hierarchy.
  int ranks_per_node = 0;
  // Resume even though the data differs from the checkpoint's (data_fingerprint.h).
  bool accept_data_change = false;
  // Evaluations also generate and score BLEU (Seq2SeqTrainer's predict_with_generate).
  GenerationEval generation;
};

class Engine {
 public:
  // `host`: the host memory offload and cpu_checkpointing use (pinned next to a GPU), which
  // must outlive the engine (the communicators stage device buffers through it too); null: the
  // engine makes its own with make_host_device().
  Engine(Plugin& plugin, config::TrainPlan plan, comm::Communicator& world, Device& device,
         const dscpp_ops& ops, TrainOptions options, Device* host = nullptr);
  ~Engine();

  // Initialise (or load), train to the target, evaluate, save — everything the CLI asks for.
  void run();

  void train_step();
  EvalResult evaluate();
  void save(const std::string& save_dir);
  // From <load_dir>/<load_tag> ("" = the tag `latest` names), taking `parts` of it.
  void load(const std::string& load_dir, const std::string& load_tag = "", const ResumeParts& parts = {});

  // ZeRO-Inference beside evaluation (an engine made with eval_only): the weights loaded as
  // --eval_only loads them, then the parts a generation loop drives; finish releases the
  // gathered layers and prints the memory peaks.
  struct Inference {
    LayerRunner& runner;
    ModelParams params;
    comm::Communicator& world;
    int64_t micro_batch;
  };
  Inference prepare_inference();
  void finish_inference();

  int64_t total_steps() const { return *options_.steps; }
  const TrainCounters& counters() const { return counters_; }
  const FlatLayout& layout() const { return zero_.layout; }
  int zero_stage() const { return plan_.zero.stage; }

 private:
  void allocate(const dscpp_ops& ops);
  // Rank 0 says once, at the first micro-batch a model computes in part, what its batch_lengths gave.
  void say_lengths(const MicroBatch& mb);
  bool said_lengths_ = false;
  RunMemoryFacts memory_facts(const dscpp_ops& ops) const;  // engine_memory.cpp
  void run_eval_only();  // engine_eval.cpp
  std::string load_inference_weights();  // engine_eval.cpp: the weights' source, for the log
  // The run's initial weights: --init_from, or the plugin's init_from (not both); path "" = none.
  InitialWeights initial_weights() const;
  [[noreturn]] void out_of_memory(const OutOfDeviceMemory& e);  // engine_memory.cpp, as the reports below
  [[noreturn]] void eval_out_of_memory(const OutOfDeviceMemory& e);  // engine_eval.cpp
  int64_t deepspeed_estimate() const;
  void initialise_params();
  void initialise(const FlatLayout& layout, ParamStore& store);  // one store's owned elements
  // The gradient guard's verdict on this rank's reduced gradients; `local_loss`: this rank's loss
  // for the step.
  GradVerdict check_gradients(double local_loss);
  void report();
  void log_memory_peaks();
  CheckpointView checkpoint_view();
  MemoryStats host_stats() const;  // the host device, plus the swap buffer pool as optimizer state
  ForwardPasses forward_passes();  // engine_eval.cpp
  bool profiling_step() const { return profiler_ && counters_.global_steps + 1 == profiler_->profile_step(); }

  Plugin& plugin_;
  const TrainPlan plan_;  // the checked config, resolved (configs/plans.h)
  comm::Communicator& world_;
  Device& device_;
  std::unique_ptr<Device> own_host_;  // when the caller gave no host device
  Device* host_;  // offloaded state (offload_optimizer / offload_param device cpu or nvme buffers)
  TrainOptions options_;

  ZeroState zero_;  // layout, parameters, gradients, optimizer, master weights
  std::unique_ptr<RunMemory> memory_;  // the planner: this run's facts, activation checkpointing
  MemoryPlan memory_plan_;            // its plan for this run
  std::unique_ptr<FlopsProfiler> profiler_;  // flops_profiler.enabled; outlives runner_, which uses its ops
  std::unique_ptr<LayerRunner> runner_;
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<StepLog> log_;  // progress lines, timers, csv_monitor, comms_logger
  std::unique_ptr<GradGuard> guard_;  // overflow, norm, clipping, non-finite steps; owns the loss scaler
  TrainCounters counters_;
  std::optional<DataFingerprint> data_;  // computed at the first save or load
};

}  // namespace dscpp::runtime
