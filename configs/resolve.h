// Internal to configs/: the steps after reading, in the order load.cpp runs them.
#pragma once

#include "configs/load.h"
#include "configs/reader.h"

namespace dscpp::config {

// Maps deprecated keys onto their replacements (refusing old + new together).
void apply_deprecations(LoadedConfig& c);
// Fills every "auto" the reader met, the way the HF Trainer / Accelerate integrations do,
// and refuses non-auto values that contradict a fact the caller gave explicitly.
void resolve_autos(LoadedConfig& c, const std::vector<PendingAuto>& autos, const RunFacts& facts);
// Without an "optimizer" block the runtime trains as the HF Trainer builds its optimizer (DeepSpeed
// itself would need a client optimizer): AdamW from the training arguments, biases and norms
// without weight decay, and (without a "scheduler" block) linear decay after warmup. The
// "dscpp" section's no_weight_decay and lr_scheduler_type override either choice.
void supply_trainer_defaults(LoadedConfig& c, const RunFacts& facts);
// DeepSpeed's derivation and check of train_batch_size = micro × accumulation × dp size.
void resolve_batch_sizes(LoadedConfig& c, const RunFacts& facts);
// Cross-key rules: what DeepSpeed asserts across sections (configs/rules.cpp).
void check_rules(LoadedConfig& c);

}  // namespace dscpp::config
