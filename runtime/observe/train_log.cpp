#include "runtime/observe/train_log.h"

#include "core/byte_size.h"
#include "core/error.h"

#include <fmt/format.h>

#include <filesystem>

namespace dscpp::runtime {

std::string Timers::report_and_reset() {
  static const char* order[] = {"fwd", "bwd", "bwd_allreduce", "step", "data"};
  std::string out;
  for (const char* name : order) {
    auto it = totals_.find(name);
    if (it == totals_.end()) continue;
    out += fmt::format("{}{}: {:.2f}", out.empty() ? "" : " | ", name, it->second * 1e3);
  }
  totals_.clear();
  return out;
}

CsvMonitor::CsvMonitor(const config::TensorboardConfig& c) : enabled_(c.enabled) {
  if (!enabled_) return;
  dir_ = (std::filesystem::path(c.output_path.empty() ? "." : c.output_path) / c.job_name).string();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) fail("csv_monitor: cannot create {}: {}", dir_, ec.message());
}

void CsvMonitor::record(const std::string& event, int64_t step, double value) {
  if (!enabled_) return;
  auto& f = files_[event];
  if (!f) {
    std::string file = event;
    for (char& ch : file)
      if (ch == '/') ch = '_';
    auto path = std::filesystem::path(dir_) / (file + ".csv");
    f = std::make_unique<std::ofstream>(path);
    if (!*f) fail("csv_monitor: cannot write {}", path.string());
    *f << "step," << event << "\n";
  }
  *f << step << "," << fmt::format("{:.9g}", value) << "\n";
  f->flush();
}

std::string format_step_line(const StepReport& r) {
  std::string line = fmt::format("step {}/{} | loss {:.4f} | lr {:.3e}", r.step, r.total_steps, r.loss, r.lr);
  if (r.grad_norm >= 0) line += fmt::format(" | grad norm {:.3f}", r.grad_norm);
  line += fmt::format(" | {:.1f} samples/s", r.samples_per_s);
  if (r.tokens_per_s > 0) line += fmt::format(" | {:.0f} tokens/s", r.tokens_per_s);
  line += fmt::format(" | mem {} (peak {})", format_bytes(r.memory.total_current), format_bytes(r.memory.total_peak));
  if (r.loss_scale > 0) line += fmt::format(" | loss scale {:g}", r.loss_scale);
  if (r.skipped) line += fmt::format(" | skipped {}", r.skipped);
  return line;
}

}  // namespace dscpp::runtime
