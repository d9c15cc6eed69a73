// Engine checkpoints: DeepSpeed's directory shape (<save_dir>/latest, <save_dir>/<tag>/),
// tensors in safetensors files a user can open, and a manifest that says what is where.
//
//   <tag>/manifest.json        format, dscpp version, ZeRO stage, world size, batch sizes,
//                              counters, LR-schedule position, optimizer type and step counts,
//                              every parameter (name, shape, numel, flat offset), the config
//   <tag>/model.safetensors    fp32 parameters by full name "<layer>.<param>" (stage 0: rank 0)
//   <tag>/optimizer.safetensors  state by "<param>/<state>" (e.g. "fc1.weight/exp_avg")
//
// Written through runtime/checkpoint_dir.h (staging directory, rename, `latest` last), so an
// interrupted save never replaces the last good checkpoint. Loading checks the manifest
// against the running model and config and names every mismatch.
#pragma once

#include "collectives/communicator.h"
#include "runtime/layer_runner.h"
#include "runtime/lr_schedule.h"
#include "runtime/optimizer.h"

#include <cstdint>
#include <string>

namespace dscpp::runtime {

struct TrainCounters {
  int64_t global_steps = 0;
  int64_t global_samples = 0;
  int64_t skipped_steps = 0;
  int64_t micro_steps = 0;
};

struct CheckpointView {
  const FlatLayout* layout = nullptr;
  float* params = nullptr;  // fp32 flat, host-addressable
  Optimizer* optimizer = nullptr;
  LrSchedule* schedule = nullptr;
  TrainCounters* counters = nullptr;
  int zero_stage = 0;
  int64_t train_batch_size = 0;
  int64_t micro_batch = 0;
  int64_t gradient_accumulation_steps = 0;
  uint64_t seed = 0;
  std::string config_json;  // the effective DeepSpeed config, stored for reference
};

extern const int kCheckpointFormatVersion;

std::string step_tag(int64_t global_steps);  // "global_step<N>"

// Collective over `comm`. Returns the committed tag directory.
std::string save_checkpoint(const std::string& save_dir, const std::string& tag, comm::Communicator& comm,
                            const CheckpointView& view);
// Collective over `comm`. `tag_dir` is <load_dir>/<tag>. Throws dscpp::Error listing every
// mismatch between the checkpoint and the running model/config.
void load_checkpoint(const std::string& tag_dir, comm::Communicator& comm, const CheckpointView& view);

// Reads model weights by parameter name from a safetensors file into the flat fp32 params
// (each parameter's shape must match).
void load_weights(const std::string& path, const FlatLayout& layout, float* params);

}  // namespace dscpp::runtime
