// DeepSpeed's monitors: rank 0 writes each event (a tag, a value, the samples seen so far as
// the x-axis) to every enabled one, as DeepSpeed's MonitorMaster does. csv_monitor writes CSV
// files, tensorboard TensorBoard event files (tfevents.h), both under <output_path>/<job_name>/.
// wandb and comet need their vendors' services: they are named at start, not written
// (config::monitors_not_written).
#pragma once

#include "configs/ds_config.h"
#include "runtime/observe/tfevents.h"

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dscpp::runtime {

// One file per event, named after the event with '/' and ' ' replaced by '_', header
// "step,<the event's last part>", one row per record (x = samples), appended to (DeepSpeed's).
class CsvMonitor {
 public:
  explicit CsvMonitor(const config::TensorboardConfig& c);
  bool enabled() const { return enabled_; }
  void record(const std::string& event, int64_t step, double value);
  std::string directory() const { return dir_; }

 private:
  bool enabled_ = false;
  std::string dir_;
  std::map<std::string, std::unique_ptr<std::ofstream>> files_;
};

struct MonitorEvent {
  std::string tag;  // DeepSpeed's, e.g. "Train/Samples/train_loss"
  double value = 0;
  int64_t samples = 0;
};

class Monitors {
 public:
  // Writes only where `rank0`; nothing is created elsewhere.
  Monitors(const config::TensorboardConfig& csv, const config::TensorboardConfig& tensorboard, bool rank0);
  void write(const std::vector<MonitorEvent>& events);
  // A run resumed at `samples`: TensorBoard forgets an earlier run's points from there on.
  void resumed_at(int64_t samples);
  // Makes what was written readable (every steps_per_print and at the end).
  void flush();
  // "tensorboard: FILE; csv_monitor: DIR" for the start of the log; "" when none is on.
  std::string where() const;

 private:
  CsvMonitor csv_;
  std::unique_ptr<EventFileWriter> tensorboard_;
};

}  // namespace dscpp::runtime
