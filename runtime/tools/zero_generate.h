// ZeRO-Inference generation across ranks (`dscpp --num_procs N PLUGIN.so --deepspeed_config ds.json
// --generate --prompts FILE …`), as DeepSpeed's t0.py runs it with generate(synced_gpus=True):
// the parameters live where the config puts them (partitioned at stage 3, offload_param cpu or
// nvme), each rank continues its own share of the prompts (prompt i goes to rank i mod N), and
// since at stage 3 every layer's gather is a collective, every rank joins every encoder pass and
// decode step until the last rank's last prompt is done: a rank whose prompts are finished
// follows the others' gathers without computing. Up to --batch_size prompts (default 8) are
// decoded together; an encoder-decoder's at most train_micro_batch_size_per_gpu, the batch its
// encoder's runner holds. Each rank prints its
// prompts and outputs as `rank R:` / `   in=…` / `  out=…`.
#pragma once

#include "device/device.h"
#include "runtime/model/plugin.h"
#include "runtime/tools/generate.h"
#include "runtime/train/engine.h"

namespace dscpp::runtime {

int run_zero_generate(const GenerateOptions& options, const Plugin& plugin, Device& device,
                      const Engine::Inference& inference);

}  // namespace dscpp::runtime
