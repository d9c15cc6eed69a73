// The engine's weights in and out: the seeded initialisation of the owned slices, a run's
// initial weights, and checkpoints saved and resumed (runtime/train/checkpoint.h does the files).
#include "runtime/train/engine.h"

#include "checkpoint/checkpoint_dir.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/model/init.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace dscpp::runtime {

CheckpointView Engine::checkpoint_view() {
  CheckpointView v;
  v.layout = &zero_.layout;
  v.master = zero_.master.get();
  v.params = zero_.params.get();
  if (zero_.frozen) {
    v.frozen_layout = &zero_.frozen_layout;
    v.frozen = zero_.frozen.get();
  }
  v.adapter_config = plugin_.adapter_config();
  v.device = &device_;
  v.params_dtype = plan_.precision.params;
  v.scaler = guard_->scaler().checks_overflow() ? &guard_->scaler() : nullptr;
  v.optimizer = zero_.optimizer.get();
  v.schedule = schedule_.get();
  v.counters = &counters_;
  v.zero = plan_.zero;
  v.train_batch_size = plan_.batch.train_batch;
  v.micro_batch = plan_.batch.micro;
  v.gradient_accumulation_steps = plan_.batch.gas;
  v.seed = options_.seed;
  if (!data_) data_ = data_fingerprint(plugin_);
  v.data = &*data_;
  v.accept_data_change = options_.accept_data_change;
  v.config_json = plan_.effective_json;
  v.gather_16bit_weights = plan_.zero.gather_16bit_weights_on_save;
  v.export_config = plugin_.export_config();
  v.file_transposed.assign(plugin_.file_transposed().begin(), plugin_.file_transposed().end());
  v.tied = plugin_.tied_names();
  return v;
}

void Engine::initialise_params() {
  initialise(zero_.layout, *zero_.params);
  if (zero_.frozen) initialise(zero_.frozen_layout, *zero_.frozen);
  if (zero_.master) zero_.master->refresh_from_params();
  zero_.model().publish();
}

void Engine::initialise(const FlatLayout& layout, ParamStore& store) {
  // Only the elements this rank owns (zero.Init: at stage 3 no rank ever holds the whole
  // model), each from (seed, name, index) whatever the layout; below stage 3 every rank holds
  // everything and owns it all for this purpose. Through the parameters' home, wherever the
  // slices live (device, host, NVMe).
  const int owner = plan_.zero.parameters_partitioned ? world_.rank() : 0;
  ParamHome& home = store.home();
  std::vector<float> host;
  for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
    const PartitionGroup& g = layout.groups[gi];
    const int64_t own_begin = plan_.zero.parameters_partitioned ? g.owned_begin(owner) : g.begin;
    const int64_t own_end = own_begin + (plan_.zero.parameters_partitioned ? g.part : g.numel);
    for (const ParamSlot& s : layout.params) {
      if (s.layer < g.first_layer || s.layer >= g.end_layer) continue;  // another group's
      int64_t lo = std::max(own_begin, s.offset), hi = std::min(own_end, s.offset + s.numel);
      if (hi <= lo) continue;
      host.resize(static_cast<size_t>(hi - lo));
      init_range(options_.seed, s.name, s.init, s.init_a, lo - s.offset, hi - lo, host.data());
      if (plan_.zero.parameters_partitioned) {
        home.write_from_host(static_cast<int>(gi), lo - own_begin, hi - lo, host.data());
      } else {
        std::vector<unsigned char> converted(host.size() * dtype_size(plan_.precision.params));
        convert(host.data(), DType::f32, converted.data(), plan_.precision.params, host.size());
        device_.copy_from_host(
            static_cast<char*>(store.full()) + lo * static_cast<int64_t>(dtype_size(plan_.precision.params)),
            converted.data(), converted.size());
      }
    }
  }
}

InitialWeights Engine::initial_weights() const {
  InitialWeights w;
  if (!options_.init_from.empty() && !plugin_.init_from().empty())
    fail("--init_from {}: model {} already starts from {} (its own arguments say so); give the weights once",
         options_.init_from, plugin_.name(), plugin_.init_from());
  w.path = !options_.init_from.empty() ? options_.init_from : plugin_.init_from();
  w.partial = options_.init_from.empty() && plugin_.init_partial();
  w.transposed = plugin_.file_transposed();
  w.tied = plugin_.tied_names();
  w.adapter_from = plugin_.adapter_from();
  return w;
}

void Engine::save(const std::string& save_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir = save_checkpoint(save_dir, step_tag(counters_.global_steps), world_, checkpoint_view());
  if (world_.rank() == 0) log::info("saved checkpoint {} in {:.2f} s", dir,
                                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void Engine::load(const std::string& load_dir, const std::string& load_tag, const ResumeParts& parts) {
  const std::string dir = ckpt::tag_dir_to_load(load_dir, load_tag);
  CheckpointView v = checkpoint_view();
  v.resume = parts;
  load_checkpoint(dir, world_, v);
  if (world_.rank() == 0)
    log::info("resumed from {} at step {} ({} samples seen)", dir, counters_.global_steps, counters_.global_samples);
}

}  // namespace dscpp::runtime
