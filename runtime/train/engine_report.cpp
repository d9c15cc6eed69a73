// The flops profiler the engine runs its layers through, and its report.
#include "core/byte_size.h"
#include "core/log.h"
#include "runtime/train/engine.h"

#include <fmt/format.h>

#include <fstream>

namespace dscpp::runtime {

std::unique_ptr<FlopsProfiler> Engine::make_profiler() const {
  std::vector<std::string> names;
  std::vector<int64_t> params;
  for (size_t l = 0; l < plugin_.layers().size(); ++l) {
    names.push_back(plugin_.layers()[l].name);
    params.push_back(layout_.layer_range[l].second - layout_.layer_range[l].first);
  }
  return std::make_unique<FlopsProfiler>(ops_, std::move(names), std::move(params), plan_.flops_profiler);
}

// DeepSpeed prints the profile on rank 0, into output_file when one is set.
void Engine::report_profile(double step_s) {
  if (world_.rank() != 0) return;
  const std::string text = profiler_->report(step_s, plan_.batch.train_batch / world_.size());
  const auto& file = plan_.flops_profiler.output_file;
  if (!file) return log::info("{}", text);
  std::ofstream out(*file);
  out << text;
  if (!out) fail("flops_profiler.output_file {}: cannot write it", *file);
  log::info("flops profiler: step {} profile written to {}", profiler_->profile_step(), *file);
}

}  // namespace dscpp::runtime
