#include "runtime/observe/monitors.h"

#include "core/error.h"

#include <fmt/format.h>

#include <filesystem>

namespace dscpp::runtime {
namespace {

// DeepSpeed's layout for both: <output_path>/<job_name>/ (output_path "" = the working directory).
std::string monitor_dir(const config::TensorboardConfig& c) {
  return (std::filesystem::path(c.output_path.empty() ? "." : c.output_path) / c.job_name).string();
}

}  // namespace

CsvMonitor::CsvMonitor(const config::TensorboardConfig& c) : enabled_(c.enabled) {
  if (!enabled_) return;
  dir_ = monitor_dir(c);
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
      if (ch == '/' || ch == ' ') ch = '_';
    auto path = std::filesystem::path(dir_) / (file + ".csv");
    // Appended to, as DeepSpeed's monitor does: a resumed run continues the file. The header is
    // DeepSpeed's (the tag's last part), written once per file.
    std::error_code ec;
    const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
    f = std::make_unique<std::ofstream>(path, std::ios::app);
    if (!*f) fail("csv_monitor: cannot write {}", path.string());
    if (fresh) *f << "step," << event.substr(event.rfind('/') + 1) << "\n";
  }
  *f << step << "," << fmt::format("{:.9g}", value) << "\n";
  f->flush();
}

Monitors::Monitors(const config::TensorboardConfig& csv, const config::TensorboardConfig& tensorboard, bool rank0)
    : csv_(rank0 ? csv : config::TensorboardConfig{}) {
  if (rank0 && tensorboard.enabled) tensorboard_ = std::make_unique<EventFileWriter>(monitor_dir(tensorboard));
}

void Monitors::write(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    csv_.record(e.tag, e.samples, e.value);
    if (tensorboard_) tensorboard_->scalar(e.tag, e.samples, e.value);
  }
}

void Monitors::resumed_at(int64_t samples) {
  // TensorBoard keeps an earlier run's points before this step and drops those from it on: the
  // checkpoint's own step stays, the killed run's steps after it go.
  if (tensorboard_) tensorboard_->session_start(samples + 1);
}

void Monitors::flush() {
  if (tensorboard_) tensorboard_->flush();
}

std::string Monitors::where() const {
  std::string out;
  if (tensorboard_) out = "tensorboard: " + tensorboard_->path();
  if (csv_.enabled()) out += (out.empty() ? "" : "; ") + std::string("csv_monitor: ") + csv_.directory();
  return out;
}

}  // namespace dscpp::runtime
