// Forward-only passes over the model as it stands: the eval split, and the forward pass the
// runtime lends the plugin's report on rank 0. At ZeRO stage 3 a forward pass gathers parameters
// collectively, so the other ranks follow every pass the busiest rank (evaluation) or rank 0
// (the report) makes.
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"
#include "runtime/model/plugin.h"
#include "runtime/observe/monitors.h"
#include "runtime/train/layer_runner.h"
#include "runtime/zero/model_params.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::runtime {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // correct / counted
  int64_t counted = 0;
  std::optional<double> bleu, gen_len;  // with generation (generation.h)
};

// What a forward pass runs through.
struct ForwardPasses {
  const Plugin& plugin;
  ModelParams params;
  LayerRunner& runner;
  comm::Communicator& world;
  Device& device;
  int64_t micro = 1;                    // samples per pass
  bool parameters_partitioned = false;  // ZeRO stage 3: passes gather collectively
  bool collective() const { return parameters_partitioned && world.size() > 1; }
};

// Collective: every eval sample once across the world (rank r takes r, r+W, ...).
EvalResult evaluate(const ForwardPasses& f);
// Collective at stage 3: the plugin's report on rank 0, the other ranks following its passes.
void run_plugin_report(const ForwardPasses& f);
// "loss L, accuracy A%[, perplexity P] (N tokens|samples)"; tokens_per_sample 0: not a language model.
std::string format_eval(const EvalResult& r, int64_t tokens_per_sample, int loss_digits = 4);
// The same figures as monitor events at `samples` (docs/training.md lists the tags).
std::vector<MonitorEvent> eval_events(const EvalResult& r, int64_t samples, int64_t tokens_per_sample);

}  // namespace dscpp::runtime
