// Engine checkpoints: DeepSpeed's directory shape (<save_dir>/latest, <save_dir>/<tag>/),
// tensors in safetensors files a user can open, and a manifest that says what is where
// (the files and their format: checkpoint/manifest.h).
//
// What is saved is every bit of state a resumed run needs to continue exactly: the fp32
// master weights (never the 16-bit parameters: they are the master rounded), the optimizer
// state and step count, the loss-scaler state (fp16), the LR-schedule position, the
// counters (global steps and samples, skipped steps, micro steps: the data position and the
// per-micro-step seeds follow from them).
//
// Stage 0: rank 0 writes model.safetensors (fp32 by parameter name) and
// optimizer.safetensors. Stages 1–3: every rank writes its own partitions; rank 0 the
// manifest. Written through checkpoint/checkpoint_dir.h (staging directory, rename,
// `latest` last), so an interrupted save never replaces the last good checkpoint.
//
// Loading accepts a checkpoint of any stage and world size: each rank reads, for every
// parameter, just the fragments its own partitions hold under the running layout (the
// saved layout says where they are), so no rank materialises more than it owns; padding
// keeps the running layout's initial values. The 16-bit parameters then follow from the
// master (DeepSpeed's load_from_fp32_weights) and are published (stage 1/2 allgather, stage
// 3 persistent groups). The manifest is checked against the running model and config first
// and every mismatch is named.
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/model/flat_layout.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optimizer.h"
#include "runtime/plans.h"
#include "runtime/train/data_fingerprint.h"
#include "runtime/zero/master_weights.h"
#include "runtime/zero/param_store.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct TrainCounters {
  int64_t global_steps = 0;
  int64_t global_samples = 0;
  int64_t skipped_steps = 0;
  int64_t micro_steps = 0;
};

// What a resume takes from a checkpoint, as DeepSpeed's load_checkpoint arguments choose it.
// Whatever is not taken starts as in a fresh run; the fp32 master weights then come from the
// 16-bit parameters (the loaded master rounded), as DeepSpeed refreshes them from its module.
struct ResumeParts {
  // Adam's moments and step count (bias correction restarts) and the fp16 loss scaler, which
  // DeepSpeed's ZeRO checkpoints keep with the optimizer state.
  bool optimizer_states = true;
  bool lr_scheduler_states = true;  // false: the LR schedule restarts from its first step
  // Weights only: also the counters (global steps and samples, skipped and micro steps, hence
  // the data position) and the LR schedule start fresh.
  bool module_only = false;
};

// master, optimizer and schedule are null for a weights-only engine (--eval_only): loading then
// reads just the fp32 master weights, rounded into the parameters, and saving is not possible.
struct CheckpointView {
  const FlatLayout* layout = nullptr;
  MasterWeights* master = nullptr;
  ParamStore* params = nullptr;
  // The frozen parameters (runtime/model/frozen_params.h), null when none is: saved by name in
  // their storage dtype as <tag>/frozen.safetensors (they never had an fp32 master), loaded from it.
  const FlatLayout* frozen_layout = nullptr;
  ParamStore* frozen = nullptr;
  Optimizer* optimizer = nullptr;
  LrSchedule* schedule = nullptr;
  LossScaler* scaler = nullptr;  // fp16 runs; nullptr when there is none
  TrainCounters* counters = nullptr;
  Device* device = nullptr;
  ZeroPlan zero;
  DType params_dtype = DType::f32;
  int64_t train_batch_size = 0;
  int64_t micro_batch = 0;
  int64_t gradient_accumulation_steps = 0;
  uint64_t seed = 0;
  std::string config_json;  // the effective DeepSpeed config, stored for reference
  // The training data (data_fingerprint.h): recorded at save, compared at load unless
  // accept_data_change (--accept_data_change) says the change is deliberate.
  const DataFingerprint* data = nullptr;
  bool accept_data_change = false;
  ResumeParts resume;  // load_checkpoint only
  // stage3_gather_16bit_weights_on_model_save: also write the consolidated parameters in their
  // training dtype as <tag>/model_16bit/model.safetensors (DeepSpeed's save_16bit_model), with
  // the model's config.json beside it where it has one: a directory transformers' from_pretrained
  // loads. Gathered one partition group at a time; rank 0 holds them in host memory to write them.
  bool gather_16bit_weights = false;
  // What files with Hugging Face names need beside the weights (checkpoint/hf_layout.h): the
  // model's config.json for export-hf (saved as <tag>/config.json; "" = none), the parameters
  // the files store transposed, and the other names of shared parameters (→ the owner's).
  std::string export_config;
  std::vector<std::string> file_transposed;
  std::map<std::string, std::string> tied;
  // PEFT's adapter_config.json for the adapter parameters (ParamSlot::adapter), saved beside the
  // manifest so that export-hf --adapter writes what PeftModel.from_pretrained loads; "" = none.
  std::string adapter_config;
};

std::string step_tag(int64_t global_steps);  // "global_step<N>"

// Collective over `comm`. Returns the committed tag directory.
std::string save_checkpoint(const std::string& save_dir, const std::string& tag, comm::Communicator& comm,
                            const CheckpointView& view);
// Collective over `comm`. `tag_dir` is <load_dir>/<tag>. Throws dscpp::Error listing every
// mismatch between the checkpoint and the running model/config.
void load_checkpoint(const std::string& tag_dir, comm::Communicator& comm, const CheckpointView& view);

// Where a run's initial weights come from: --init_from, or the plugin's init_from.
struct InitialWeights {
  std::string path;  // a .safetensors file, a sharded index, or a directory (checkpoint/weight_files.h)
  bool partial = false;              // missing parameters keep their init; unused tensors are listed
  std::set<std::string> transposed;  // parameters the files hold as [cols, rows]
  std::map<std::string, std::string> tied;  // a shared parameter's other names → its owner's
  // The adapter parameters' weights (a PEFT adapter_model.safetensors, names "base_model.model." +
  // full name); "" = they keep their init. The base weights (`path`) never hold them.
  std::string adapter_from;
};

// The fp32 master weights from `w` by parameter name (any float dtype), each rank reading only
// what it owns; then the parameters follow and are published. Collective over `comm`. Throws
// dscpp::Error naming every misshapen parameter and, unless w.partial, every missing parameter
// and every tensor the model does not use (with the closest parameter name).
void load_initial_weights(const InitialWeights& w, comm::Communicator& comm, const CheckpointView& view);

}  // namespace dscpp::runtime
