#include "runtime/checkpoint.h"

#include "build_config.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/checkpoint_dir.h"
#include "runtime/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace dscpp::runtime {

const int kCheckpointFormatVersion = 1;

namespace fs = std::filesystem;
using nlohmann::json;

std::string step_tag(int64_t global_steps) { return fmt::format("global_step{}", global_steps); }

namespace {

json manifest_of(const CheckpointView& v, int world_size) {
  json params = json::array();
  for (const ParamSlot& s : v.layout->params)
    params.push_back({{"name", s.name}, {"shape", s.shape}, {"numel", s.numel}, {"offset", s.offset}});
  json steps = json::array({v.optimizer->step_count(0)});
  json m = {
      {"format", "dscpp-checkpoint"},
      {"format_version", kCheckpointFormatVersion},
      {"dscpp_version", DSCPP_VERSION},
      {"zero_stage", v.zero_stage},
      {"world_size", world_size},
      {"train_batch_size", v.train_batch_size},
      {"train_micro_batch_size_per_gpu", v.micro_batch},
      {"gradient_accumulation_steps", v.gradient_accumulation_steps},
      {"global_steps", v.counters->global_steps},
      {"global_samples", v.counters->global_samples},
      {"skipped_steps", v.counters->skipped_steps},
      {"micro_steps", v.counters->micro_steps},
      {"lr_scheduler", {{"type", v.schedule->name()}, {"last_batch_iteration", v.schedule->last_batch_iteration()}}},
      {"optimizer", {{"type", v.optimizer->name()}, {"step", steps}}},
      {"data_sampler", {{"seed", v.seed}, {"micro_batches_consumed", v.counters->micro_steps}}},
      {"flat_numel", v.layout->total},
      {"params", params},
      {"files", {{"model", "model.safetensors"}, {"optimizer", "optimizer.safetensors"}}},
  };
  try {
    m["ds_config"] = json::parse(v.config_json);
  } catch (const std::exception&) {
    m["ds_config"] = v.config_json;
  }
  return m;
}

std::vector<TensorToWrite> model_tensors(const CheckpointView& v) {
  std::vector<TensorToWrite> out;
  for (const ParamSlot& s : v.layout->params) out.push_back({s.name, DType::f32, s.shape, v.params + s.offset});
  return out;
}

std::vector<TensorToWrite> optimizer_tensors(const CheckpointView& v) {
  std::vector<TensorToWrite> out;
  for (const StateTensor& st : v.optimizer->state(0))
    for (const ParamSlot& s : v.layout->params) out.push_back({s.name + "/" + st.name, DType::f32, s.shape, st.data + s.offset});
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

std::string save_checkpoint(const std::string& save_dir, const std::string& tag, comm::Communicator& comm,
                            const CheckpointView& v) {
  std::string staging;
  if (comm.rank() == 0) {
    remove_stale_staging(save_dir);
    staging = checkpoint_staging_dir(save_dir, tag);
    // Stage 0: every rank holds the same model and optimizer state; rank 0 writes them once.
    std::map<std::string, std::string> meta{{"format", "dscpp"}, {"global_steps", std::to_string(v.counters->global_steps)}};
    write_safetensors((fs::path(staging) / "model.safetensors").string(), model_tensors(v), meta);
    write_safetensors((fs::path(staging) / "optimizer.safetensors").string(), optimizer_tensors(v), meta);
    std::ofstream f(fs::path(staging) / "manifest.json");
    f << manifest_of(v, comm.size()).dump(2) << "\n";
    f.close();
    if (!f) fail("cannot write {}", (fs::path(staging) / "manifest.json").string());
  }
  comm.barrier();
  // Fault injection for the tests of the commit protocol: die with every file written but
  // the checkpoint not yet committed (the most convincing moment for a torn checkpoint).
  if (const char* f = std::getenv("DSCPP_FAULT_INJECT"); f && std::string(f) == "save_before_commit") {
    log::error("DSCPP_FAULT_INJECT=save_before_commit: dying before committing {}", tag);
    std::_Exit(17);
  }
  if (comm.rank() == 0) commit_checkpoint(save_dir, tag);
  comm.barrier();
  return (fs::path(save_dir) / tag).string();
}

void load_weights(const std::string& path, const FlatLayout& layout, float* params) {
  SafetensorsFile file(path);
  std::vector<std::string> problems;
  for (const ParamSlot& s : layout.params) {
    const TensorInfo* t = file.find(s.name);
    if (!t) {
      problems.push_back(fmt::format("parameter '{}' {} is missing", s.name, shape_text(s.shape)));
      continue;
    }
    if (t->shape != s.shape) {
      problems.push_back(fmt::format("parameter '{}' has shape {} in the file but the model declares {}", s.name,
                                     shape_text(t->shape), shape_text(s.shape)));
      continue;
    }
    file.read(s.name, 0, s.numel, params + s.offset, DType::f32);
  }
  if (!problems.empty()) fail("{} does not fit the model: {}", path, fmt::join(problems, "; "));
}

void load_checkpoint(const std::string& tag_dir, comm::Communicator& comm, const CheckpointView& v) {
  fs::path dir(tag_dir);
  std::ifstream in(dir / "manifest.json");
  if (!in) fail("checkpoint {}: manifest.json is missing (not a dscpp checkpoint, or an unfinished save)", tag_dir);
  json m;
  try {
    m = json::parse(in);
  } catch (const std::exception& e) {
    fail("checkpoint {}: manifest.json is not valid JSON: {}", tag_dir, e.what());
  }
  auto get = [&](const char* key) -> const json& {
    if (!m.contains(key)) fail("checkpoint {}: manifest.json has no '{}'", tag_dir, key);
    return m[key];
  };
  if (m.value("format", "") != "dscpp-checkpoint" || get("format_version").get<int>() != kCheckpointFormatVersion)
    fail("checkpoint {}: manifest format {} version {}, expected dscpp-checkpoint version {}", tag_dir,
         m.value("format", "?"), m.value("format_version", -1), kCheckpointFormatVersion);

  std::vector<std::string> problems;
  if (get("zero_stage").get<int>() != v.zero_stage)
    problems.push_back(fmt::format("it was written with ZeRO stage {}, this run uses stage {}",
                                   m["zero_stage"].get<int>(), v.zero_stage));
  if (get("train_batch_size").get<int64_t>() != v.train_batch_size)
    problems.push_back(fmt::format("it was trained with train_batch_size {}, this run has {} (the data position "
                                   "would not resume exactly)",
                                   m["train_batch_size"].get<int64_t>(), v.train_batch_size));
  if (get("optimizer")["type"].get<std::string>() != v.optimizer->name())
    problems.push_back(fmt::format("its optimizer is {}, this run's is {}", m["optimizer"]["type"].get<std::string>(),
                                   v.optimizer->name()));
  std::map<std::string, std::vector<int64_t>> saved;
  for (const json& p : get("params")) saved[p["name"].get<std::string>()] = p["shape"].get<std::vector<int64_t>>();
  for (const ParamSlot& s : v.layout->params) {
    auto it = saved.find(s.name);
    if (it == saved.end())
      problems.push_back(fmt::format("parameter '{}' {} is not in it", s.name, shape_text(s.shape)));
    else if (it->second != s.shape)
      problems.push_back(fmt::format("parameter '{}' has shape {} in it, the model declares {}", s.name,
                                     shape_text(it->second), shape_text(s.shape)));
    if (it != saved.end()) saved.erase(it);
  }
  for (const auto& [name, shape] : saved)
    problems.push_back(fmt::format("it has parameter '{}' {} that the model does not declare", name, shape_text(shape)));
  if (!problems.empty())
    fail("checkpoint {} does not match this run: {}", tag_dir, fmt::join(problems, "; "));
  if (get("data_sampler")["seed"].get<uint64_t>() != v.seed && comm.rank() == 0)
    log::warn("checkpoint {} was trained with --seed {}, this run uses {}: the data order after resuming differs",
              tag_dir, m["data_sampler"]["seed"].get<uint64_t>(), v.seed);

  load_weights((dir / get("files")["model"].get<std::string>()).string(), *v.layout, v.params);
  SafetensorsFile opt((dir / m["files"]["optimizer"].get<std::string>()).string());
  for (const StateTensor& st : v.optimizer->state(0))
    for (const ParamSlot& s : v.layout->params) {
      std::string name = s.name + "/" + st.name;
      if (!opt.find(name)) fail("checkpoint {}: optimizer state '{}' is missing from {}", tag_dir, name, opt.path());
      opt.read(name, 0, s.numel, st.data + s.offset, DType::f32);
    }
  v.optimizer->set_step_count(0, m["optimizer"]["step"][0].get<int64_t>());
  v.schedule->set_last_batch_iteration(m["lr_scheduler"]["last_batch_iteration"].get<int64_t>());
  v.counters->global_steps = get("global_steps").get<int64_t>();
  v.counters->global_samples = get("global_samples").get<int64_t>();
  v.counters->skipped_steps = get("skipped_steps").get<int64_t>();
  v.counters->micro_steps = get("micro_steps").get<int64_t>();
  comm.barrier();
}

}  // namespace dscpp::runtime
