#include "runtime/train/checkpoint.h"

#include "build_config.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checksums.h"
#include "checkpoint/export_hf.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/lora.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_source.h"
#include "checkpoint/weight_files.h"
#include "configs/load.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/train/fault_injection.h"
#include "runtime/zero/local_partitions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

namespace dscpp::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

std::string step_tag(int64_t global_steps) {
  return fmt::format("global_step{}", global_steps);
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

LocalPartitions local_partitions(const CheckpointView& v, comm::Communicator& comm) {
  return LocalPartitions(*v.layout, comm.rank(), v.master, v.optimizer, v.params);
}

// ---- loss scaler <-> JSON (DeepSpeed restores options and state from the checkpoint) ----

json scaler_json(const LossScaler* s) {
  if (!s || !s->checks_overflow()) return nullptr;  // bf16/fp32: nothing to continue
  const LossScalePlan& o = s->options();
  const LossScalerState& st = s->state();
  return {{"rule", static_cast<int>(o.rule)},
          {"rule_name", rule_name(o.rule)},
          {"init_scale", o.init_scale},
          {"scale_window", o.scale_window},
          {"hysteresis", o.hysteresis},
          {"consecutive_hysteresis", o.consecutive_hysteresis},
          {"min_scale", o.min_scale},
          {"raise_at_min_scale", o.raise_at_min_scale},
          {"cur_scale", st.cur_scale},
          {"cur_iter", st.cur_iter},
          {"last_overflow_iter", st.last_overflow_iter},
          {"cur_hysteresis", st.cur_hysteresis},
          {"skipped_steps", st.skipped_steps}};
}

// An fp16 run continues the saved scaler, options included (DeepSpeed replaces the whole
// scaler on load, so fp16 settings changed in the config do not apply after a resume). A run
// without loss scaling ignores a saved scaler; an fp16 run from a checkpoint without one
// starts its scaler fresh.
void restore_scaler(const ckpt::Manifest& m, LossScaler* scaler, bool log_here) {
  const bool saved = m.has("loss_scaler") && !m.at("loss_scaler").is_null();
  const bool scaling = scaler && scaler->checks_overflow();
  if (!saved || !scaling) {
    if (scaling && log_here)
      log::info("checkpoint {} has no loss-scaler state (not an fp16 run): the scaler starts at {}", m.tag_dir,
                scaler->scale());
    return;
  }
  LossScalePlan o;
  int rule = m.get<int>("loss_scaler.rule");
  if (rule < 0 || rule > static_cast<int>(LossScaleRule::legacy))
    fail("checkpoint {}: loss_scaler.rule {} is not a known rule", m.tag_dir, rule);
  o.rule = static_cast<LossScaleRule>(rule);
  o.init_scale = m.get<double>("loss_scaler.init_scale");
  o.scale_window = m.get<int64_t>("loss_scaler.scale_window");
  o.hysteresis = m.get<int64_t>("loss_scaler.hysteresis");
  o.consecutive_hysteresis = m.get<bool>("loss_scaler.consecutive_hysteresis");
  o.min_scale = m.get<double>("loss_scaler.min_scale");
  o.raise_at_min_scale = m.get<bool>("loss_scaler.raise_at_min_scale");
  LossScalerState st;
  st.cur_scale = m.get<double>("loss_scaler.cur_scale");
  st.cur_iter = m.get<int64_t>("loss_scaler.cur_iter");
  st.last_overflow_iter = m.get<int64_t>("loss_scaler.last_overflow_iter");
  st.cur_hysteresis = m.get<int64_t>("loss_scaler.cur_hysteresis");
  st.skipped_steps = m.get<int64_t>("loss_scaler.skipped_steps");
  *scaler = LossScaler(o);
  scaler->restore(st);
}

// ---- manifest ----------------------------------------------------------------------------

ckpt::Manifest manifest_of(const CheckpointView& v, int world_size, const LocalPartitions& local) {
  ckpt::Manifest m;
  m.zero_stage = v.zero.stage;
  m.world_size = world_size;
  m.params_dtype = std::string(dtype_name(v.params_dtype));
  m.global_steps = v.counters->global_steps;
  m.layout = local.layout();
  m.optimizer_type = v.optimizer->name();
  m.optimizer_states = local.states();
  m.optimizer_step = local.optimizer_step();
  if (!v.zero.optimizer_partitioned) {
    m.storage = ckpt::Storage::by_name;
    m.files = {ckpt::kModelFile, ckpt::kOptimizerFile};
  } else {
    m.storage = ckpt::Storage::partitions;
    for (int r = 0; r < world_size; ++r) m.files.push_back(ckpt::rank_file_name(r));
  }
  m.doc = {
      {"dscpp_version", DSCPP_VERSION},
      {"train_batch_size", v.train_batch_size},
      {"train_micro_batch_size_per_gpu", v.micro_batch},
      {"gradient_accumulation_steps", v.gradient_accumulation_steps},
      {"global_samples", v.counters->global_samples},
      {"skipped_steps", v.counters->skipped_steps},
      {"micro_steps", v.counters->micro_steps},
      {"lr_scheduler", {{"type", v.schedule->name()}, {"last_batch_iteration", v.schedule->last_batch_iteration()}}},
      {"data_sampler", {{"seed", v.seed}, {"micro_batches_consumed", v.counters->micro_steps}}},
      {"loss_scaler", scaler_json(v.scaler)},
  };
  if (v.data) m.doc["data"] = v.data->to_json();
  if (!v.export_config.empty()) {
    m.doc["export_config"] = ckpt::kExportConfigFile;
    m.doc["export_config_sha256"] = ckpt::sha256_hex(v.export_config);
  }
  if (!v.file_transposed.empty()) m.doc["file_transposed"] = v.file_transposed;
  if (v.frozen) {
    std::vector<std::string> names;
    for (const ParamSlot& s : v.frozen_layout->params) names.push_back(s.name);
    m.doc["frozen"] = {{"file", ckpt::kFrozenFile}, {"dtype", dtype_name(v.params_dtype)}, {"params", names}};
  }
  std::vector<std::string> adapter;
  for (const ParamSlot& s : v.layout->params)
    if (s.adapter) adapter.push_back(s.name);
  if (!adapter.empty()) m.doc["adapter_params"] = adapter;
  if (!v.adapter_config.empty()) {
    m.doc["adapter_config"] = ckpt::kAdapterConfigFile;
    m.doc["adapter_config_sha256"] = ckpt::sha256_hex(v.adapter_config);
  }
  if (!v.tied.empty()) m.doc["tied"] = v.tied;
  try {
    m.doc["ds_config"] = json::parse(v.config_json);
  } catch (const std::exception&) {
    m.doc["ds_config"] = v.config_json;
  }
  return m;
}

// Every way the checkpoint does not fit the running model and config, in words.
std::vector<std::string> mismatches(const ckpt::Manifest& m, const CheckpointView& v, const LocalPartitions& local) {
  std::vector<std::string> problems;
  // Weights only (--eval_only, --load_module_only, --no_load_optimizer_states): another optimizer is no
  // obstacle.
  if (!v.optimizer || v.resume.module_only || !v.resume.optimizer_states)
    ;
  else if (m.optimizer_type != v.optimizer->name())
    problems.push_back(fmt::format("its optimizer is {}, this run's is {}", m.optimizer_type, v.optimizer->name()));
  else if (m.optimizer_states != local.states())
    problems.push_back(fmt::format("its optimizer state is [{}], this run's {} keeps [{}]",
                                   fmt::join(m.optimizer_states, ", "), m.optimizer_type,
                                   fmt::join(local.states(), ", ")));
  std::map<std::string, std::vector<int64_t>> saved;
  for (const ckpt::ParamDesc& p : m.layout.params) saved[p.name] = p.shape;
  std::set<std::string> saved_frozen;
  if (m.has("frozen")) saved_frozen = m.get<std::set<std::string>>("frozen.params");
  for (const ParamSlot& s : v.layout->params) {
    auto it = saved.find(s.name);
    if (it == saved.end()) {
      problems.push_back(saved_frozen.erase(s.name) > 0
                             ? fmt::format("parameter '{}' is frozen in it and trains in this run", s.name)
                             : fmt::format("parameter '{}' {} is not in it", s.name, shape_text(s.shape)));
      continue;
    }
    if (it->second != s.shape)
      problems.push_back(fmt::format("parameter '{}' has shape {} in it, the model declares {}", s.name,
                                     shape_text(it->second), shape_text(s.shape)));
    saved.erase(it);
  }
  if (v.frozen_layout != nullptr)
    for (const ParamSlot& s : v.frozen_layout->params) {
      if (saved_frozen.erase(s.name) > 0) continue;  // its shape is checked as it is read
      problems.push_back(saved.erase(s.name) > 0
                             ? fmt::format("parameter '{}' trains in it and is frozen in this run", s.name)
                             : fmt::format("parameter '{}' {} is not in it", s.name, shape_text(s.shape)));
    }
  for (const auto& [name, shape] : saved)
    problems.push_back(
        fmt::format("it has parameter '{}' {} that the model does not declare", name, shape_text(shape)));
  for (const std::string& name : saved_frozen)
    problems.push_back(fmt::format("it has frozen parameter '{}' that the model does not declare", name));
  return problems;
}

// DeepSpeed resumes into another global batch without a word; dscpp says what changes: the data
// continues from the samples seen, the LR schedule by step count, so the run is not the one an
// uninterrupted run with either batch size would have been.
void note_batch_change(const ckpt::Manifest& m, const CheckpointView& v, int world_size) {
  const int64_t tb = m.get<int64_t>("train_batch_size");
  if (tb == v.train_batch_size || v.resume.module_only) return;
  const int64_t samples = m.get<int64_t>("global_samples"), per = v.micro_batch * world_size;
  log::info("checkpoint {} was trained with train_batch_size {} (micro {} x accumulation {} x {} ranks), this run "
            "has {} (micro {} x accumulation {} x {} ranks): accepted; the data continues after the {} samples "
            "seen{}, the LR schedule at step {}, each later step takes {} samples",
            m.tag_dir, tb, m.get<int64_t>("train_micro_batch_size_per_gpu"),
            m.get<int64_t>("gradient_accumulation_steps"), m.world_size, v.train_batch_size, v.micro_batch,
            v.gradient_accumulation_steps, world_size, samples,
            samples % per == 0 ? std::string()
                               : fmt::format(" (from sample {}, a whole number of this run's micro-batches)",
                                             samples / per * per),
            m.global_steps, v.train_batch_size);
}

// A Hugging Face model directory (what save_pretrained writes under ZeRO-3 with the 16-bit
// gather): the weights as model.safetensors with "format": "pt", and the family's config.json.
constexpr const char* kModel16bitDir = "model_16bit";
constexpr const char* kModel16bitFile = "model_16bit/model.safetensors";

// Every rank's `mine`, in rank order (two allgathers: the lengths, then the padded bytes).
std::vector<std::string> allgather_strings(comm::Communicator& comm, const std::string& mine) {
  std::vector<int64_t> lengths(static_cast<size_t>(comm.size()));
  int64_t length = static_cast<int64_t>(mine.size());
  comm.allgather(&length, lengths.data(), 1, DType::i64);
  const int64_t longest = std::max<int64_t>(*std::max_element(lengths.begin(), lengths.end()), 1);
  std::vector<char> padded(static_cast<size_t>(longest)), all(static_cast<size_t>(longest * comm.size()));
  std::copy(mine.begin(), mine.end(), padded.begin());
  comm.allgather(padded.data(), all.data(), static_cast<size_t>(longest), DType::u8);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(all.data() + r * longest, static_cast<size_t>(lengths[static_cast<size_t>(r)]));
  return out;
}

// Each rank checks every size-th file against the digests recorded at save; then every rank
// fails with all the problems found, so none loads a damaged checkpoint and every log names
// the file and tensor.
void verify_files(const ckpt::Manifest& m, comm::Communicator& comm) {
  if (m.checksums.empty()) {
    if (comm.rank() == 0)
      log::warn("checkpoint {} records no SHA-256 digests (saved by an older dscpp): its contents are not verified",
                m.tag_dir);
    return;
  }
  std::string problem;
  for (size_t i = static_cast<size_t>(comm.rank()); i < m.files.size() && problem.empty();
       i += static_cast<size_t>(comm.size())) {
    try {
      problem = ckpt::verify_file(m, m.files[i]);
    } catch (const Error& e) {  // unreadable or not safetensors: still every rank's failure
      problem = fmt::format("checkpoint {} is damaged: {}", m.tag_dir, e.what());
    }
  }
  std::vector<std::string> problems;
  for (std::string& p : allgather_strings(comm, problem))
    if (!p.empty()) problems.push_back(std::move(p));
  if (!problems.empty()) fail("{}", fmt::join(problems, "; "));
}

// A resume continues the sampler's position in the data it was trained on: other data is
// refused unless the run says the change is deliberate. Weights only (--eval_only) do not care.
void check_data(const ckpt::Manifest& m, const CheckpointView& v, bool log_here) {
  if (!v.optimizer || !v.data) return;
  if (!m.has("data")) {
    if (log_here)
      log::warn("checkpoint {} records no data fingerprint (saved by an older dscpp): not checked", m.tag_dir);
    return;
  }
  const std::string diff = v.data->differences_from(DataFingerprint::from_json(m.at("data"), m.path()));
  if (diff.empty()) return;
  if (!v.accept_data_change)
    fail("checkpoint {} was trained on other data ({}); resuming would continue its sampler position in data that "
         "is not there. Give the plugin the data it was trained on, or pass --accept_data_change to resume on this "
         "data deliberately",
         m.tag_dir, diff);
  if (log_here)
    log::warn("checkpoint {} was trained on other data ({}); resuming anyway (--accept_data_change)", m.tag_dir, diff);
}

// ---- writing -----------------------------------------------------------------------------

// NaN and inf met in what this rank writes. The engine skips steps with a non-finite loss or
// gradient norm, so none should reach the weights; this is the last line: a checkpoint holding
// one is never committed. Fills may run concurrently, hence the lock.
class NonfiniteScan {
 public:
  void scan(const std::string& tensor, int64_t first, const float* p, int64_t n) {
    int64_t bad = 0, at = -1;
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) {
        if (at < 0) at = i;
        ++bad;
      }
    if (bad == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ == 0) first_ = fmt::format("{} element {}", tensor, first + at);
    count_ += bad;
  }
  int64_t count() const { return count_; }
  const std::string& first() const { return first_; }

 private:
  std::mutex mu_;
  int64_t count_ = 0;
  std::string first_;
};

// Each writer records the digests of the files it wrote in `written`, by file name.
using Written = std::map<std::string, ckpt::FileDigests>;

// `t` (memory's layout) as files with Hugging Face names hold parameter `param` (hf_layout.h).
ckpt::TensorToWrite for_file(ckpt::TensorToWrite t, const std::string& param, const CheckpointView& v) {
  if (std::find(v.file_transposed.begin(), v.file_transposed.end(), param) == v.file_transposed.end()) return t;
  return ckpt::transposed_for_file(std::move(t));
}

// Every name a parameter is written under: its own, then a shared parameter's other names.
std::vector<std::string> names_of(const std::string& param, const CheckpointView& v) {
  std::vector<std::string> names{param};
  for (const auto& [alias, owner] : v.tied)
    if (owner == param) names.push_back(alias);
  return names;
}

void write_by_name(const std::string& staging, const LocalPartitions& local, const CheckpointView& v,
                   std::map<std::string, std::string> meta, NonfiniteScan& scan, Written& written) {
  const ckpt::PartitionLayout& l = local.layout();
  meta[ckpt::kLayoutKey] = ckpt::kHfLayout;
  std::vector<ckpt::TensorToWrite> model, optimizer;
  for (size_t i = 0; i < l.params.size(); ++i)
    for (const std::string& name : names_of(l.params[i].name, v))
      model.push_back(for_file({name, DType::f32, l.params[i].shape, nullptr,
                                [&local, &scan, &l, i](int64_t first, int64_t count, void* dst) {
                                  local.copy_param_out(i, ckpt::kMasterWeights, first, count, static_cast<float*>(dst));
                                  scan.scan(l.params[i].name, first, static_cast<const float*>(dst), count);
                                }},
                               l.params[i].name, v));
  for (const std::string& state : local.states())
    for (size_t i = 0; i < l.params.size(); ++i)
      optimizer.push_back(for_file({l.params[i].name + "/" + state, DType::f32, l.params[i].shape, nullptr,
                                    [&local, &scan, &l, i, state](int64_t first, int64_t count, void* dst) {
                                      local.copy_param_out(i, state, first, count, static_cast<float*>(dst));
                                      scan.scan(l.params[i].name + "/" + state, first,
                                                static_cast<const float*>(dst), count);
                                    }},
                                   l.params[i].name, v));
  written[ckpt::kModelFile] = ckpt::write_safetensors((fs::path(staging) / ckpt::kModelFile).string(), model, meta);
  written[ckpt::kOptimizerFile] =
      ckpt::write_safetensors((fs::path(staging) / ckpt::kOptimizerFile).string(), optimizer, meta);
}

void write_partitions(const std::string& staging, const std::string& file, const LocalPartitions& local,
                      const std::map<std::string, std::string>& meta, NonfiniteScan& scan, Written& written) {
  std::vector<std::string> whats{ckpt::kMasterWeights};
  whats.insert(whats.end(), local.states().begin(), local.states().end());
  std::vector<ckpt::TensorToWrite> tensors;
  for (const std::string& what : whats)
    tensors.push_back({what,
                       DType::f32,
                       {local.layout().part_total},
                       nullptr,
                       [&local, &scan, what](int64_t first, int64_t count, void* dst) {
                         local.copy_out(what, first, count, static_cast<float*>(dst));
                         scan.scan(what, first, static_cast<const float*>(dst), count);
                       }});
  written[file] = ckpt::write_safetensors((fs::path(staging) / file).string(), tensors, meta);
}

void write_manifest(const std::string& path, const ckpt::Manifest& m) {
  std::ofstream f(path);
  f << ckpt::manifest_json(m).dump(2) << "\n";
  f.close();
  if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
}

// After the master weights changed: the 16-bit parameters follow, and every rank sees them.
void publish_master(const CheckpointView& v) {
  if (v.master) v.master->write_params();  // without a master (--eval_only) the weights went straight in
  v.params->publish();
}

}  // namespace

namespace {
// Every rank takes part in one allgather per group (device memory: one group at a time); rank 0
// keeps the gathered bytes on the host and writes them by parameter name.
void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) fail("checkpoint: cannot write {}: {}", path, std::strerror(errno));
}

// A store's parameters whole on rank 0's host, group by group (at stage 3 every rank takes part
// in each group's allgather; device memory holds one group at a time). Empty on the other ranks.
class Gathered {
 public:
  Gathered(const FlatLayout& layout, ParamStore& store, const CheckpointView& v, comm::Communicator& comm)
      : layout_(layout), elem_(dtype_size(v.params_dtype)), host_(layout.groups.size()) {
    for (size_t g = 0; g < layout.groups.size(); ++g) {
      const PartitionGroup& group = layout.groups[g];
      if (group.numel == 0) continue;
      const auto bytes = static_cast<size_t>(group.numel) * elem_;
      if (!store.partitioned()) {  // below stage 3 every rank holds the whole array
        if (comm.rank() != 0) continue;
        host_[g].resize(bytes);
        v.device->copy_to_host(host_[g].data(), static_cast<const char*>(store.full()) + group.begin * elem_, bytes);
        continue;
      }
      DeviceBuffer gathered(*v.device, bytes, MemCategory::buffers);
      store.gather_to(static_cast<int>(g), gathered.data());
      if (comm.rank() != 0) continue;
      host_[g].resize(bytes);
      v.device->copy_to_host(host_[g].data(), gathered.data(), bytes);
    }
  }
  // Every parameter under each of its names (names_of), in the files' layout.
  std::vector<ckpt::TensorToWrite> tensors(const CheckpointView& v) const {
    std::vector<ckpt::TensorToWrite> out;
    for (const ParamSlot& s : layout_.params) {
      const auto g = static_cast<size_t>(layout_.layer_group[static_cast<size_t>(s.layer)]);
      const unsigned char* data = host_[g].data() + (s.offset - layout_.groups[g].begin) * static_cast<int64_t>(elem_);
      for (const std::string& name : names_of(s.name, v))
        out.push_back(for_file({name, v.params_dtype, s.shape, data, {}}, s.name, v));
    }
    return out;
  }

 private:
  const FlatLayout& layout_;
  size_t elem_;
  std::vector<std::vector<unsigned char>> host_;
};

void write_gathered_weights(const std::string& staging, const CheckpointView& v, comm::Communicator& comm,
                            Written& written) {
  const Gathered trained(*v.layout, *v.params, v, comm);
  std::optional<Gathered> frozen;
  if (v.frozen) frozen.emplace(*v.frozen_layout, *v.frozen, v, comm);
  if (comm.rank() != 0) return;
  fs::create_directories(fs::path(staging) / kModel16bitDir);
  if (!v.export_config.empty())
    write_text((fs::path(staging) / kModel16bitDir / ckpt::kExportConfigFile).string(), v.export_config);
  std::vector<ckpt::TensorToWrite> tensors = trained.tensors(v);
  if (frozen) {
    std::vector<ckpt::TensorToWrite> more = frozen->tensors(v);
    tensors.insert(tensors.end(), more.begin(), more.end());
  }
  written[kModel16bitFile] = ckpt::write_safetensors(
      (fs::path(staging) / kModel16bitFile).string(), tensors,
      {{"format", "pt"}, {"content", "consolidated parameters"}, {ckpt::kLayoutKey, ckpt::kHfLayout}});
}

// The frozen parameters as they are (they never change and never had an fp32 master): rank 0
// writes them by name in their storage dtype.
void write_frozen(const std::string& staging, const CheckpointView& v, comm::Communicator& comm, Written& written) {
  const Gathered frozen(*v.frozen_layout, *v.frozen, v, comm);
  if (comm.rank() != 0) return;
  written[ckpt::kFrozenFile] = ckpt::write_safetensors(
      (fs::path(staging) / ckpt::kFrozenFile).string(), frozen.tensors(v),
      {{"format", "dscpp"}, {"content", "frozen parameters"}, {ckpt::kLayoutKey, ckpt::kHfLayout}});
}
}  // namespace

std::string save_checkpoint(const std::string& save_dir, const std::string& tag, comm::Communicator& comm,
                            const CheckpointView& v) {
  LocalPartitions local = local_partitions(v, comm);
  ckpt::Manifest m = manifest_of(v, comm.size(), local);
  if (comm.rank() == 0) ckpt::remove_stale_staging(save_dir);
  comm.barrier();  // the debris of a crashed save is gone before anyone writes into its staging dir
  const std::string staging = ckpt::checkpoint_staging_dir(save_dir, tag);
  std::map<std::string, std::string> meta{{"format", "dscpp"}, {"global_steps", std::to_string(m.global_steps)}};
  NonfiniteScan scan;
  Written written;  // digests of this rank's files, gathered below for rank 0's manifest
  if (m.storage == ckpt::Storage::by_name) {
    // Stage 0: every rank holds the same model and optimizer state; rank 0 writes them once.
    if (comm.rank() == 0) write_by_name(staging, local, v, meta, scan, written);
  } else {
    meta["rank"] = std::to_string(comm.rank());
    meta["world_size"] = std::to_string(comm.size());
    write_partitions(staging, m.files[static_cast<size_t>(comm.rank())], local, meta, scan, written);
  }
  double nonfinite = static_cast<double>(scan.count());
  if (scan.count() > 0)
    log::error("checkpoint {}: {} NaN/inf values in this rank's weights or optimizer state, the first in {}", tag,
               scan.count(), scan.first());
  comm.allreduce(&nonfinite, 1, DType::f64);
  if (nonfinite > 0) {
    const std::optional<std::string> previous = ckpt::read_latest_tag(save_dir);
    fail("refusing to commit checkpoint {}: {:.0f} NaN/inf values in the weights or optimizer state (each rank that "
         "holds some names the first); {} is unchanged",
         tag, nonfinite, previous ? fmt::format("latest ({})", *previous) : std::string("the save directory"));
  }
  if (v.frozen) write_frozen(staging, v, comm, written);
  if (v.gather_16bit_weights) write_gathered_weights(staging, v, comm, written);
  for (const std::string& text : allgather_strings(comm, json(written).dump()))
    for (auto& [file, digests] : json::parse(text).get<Written>()) m.checksums[file] = std::move(digests);
  // The model's config.json for export-hf, beside the manifest (whose digest of it export-hf checks).
  if (comm.rank() == 0 && !v.export_config.empty())
    write_text((fs::path(staging) / ckpt::kExportConfigFile).string(), v.export_config);
  if (comm.rank() == 0 && !v.adapter_config.empty())
    write_text((fs::path(staging) / ckpt::kAdapterConfigFile).string(), v.adapter_config);
  if (comm.rank() == 0) write_manifest((fs::path(staging) / ckpt::kManifestFile).string(), m);
  comm.barrier();
  // Tests of the commit protocol: die with every file written but the checkpoint not yet
  // committed (the most convincing moment for a torn checkpoint).
  inject_fault(FaultPoint::checkpoint_commit, 0, comm.rank(), comm.size(), [&] {
    log::error("DSCPP_FAULT_INJECT=save_before_commit: dying before committing {}", tag);
    std::_Exit(17);
  });
  if (comm.rank() == 0) ckpt::commit_checkpoint(save_dir, tag);
  comm.barrier();
  return (fs::path(save_dir) / tag).string();
}

namespace {
// The frozen parameters from <tag>/frozen.safetensors, checked against its recorded digest (by
// rank 0, every rank failing with its verdict) and its shapes, each rank reading what it owns.
void load_frozen(const ckpt::Manifest& m, const CheckpointView& v, comm::Communicator& comm) {
  const std::string path = (fs::path(m.tag_dir) / ckpt::kFrozenFile).string();
  std::string problem;
  if (comm.rank() == 0) {
    try {
      problem = ckpt::verify_file(m, ckpt::kFrozenFile);
    } catch (const Error& e) {
      problem = fmt::format("checkpoint {} is damaged: {}", m.tag_dir, e.what());
    }
  }
  for (const std::string& p : allgather_strings(comm, problem))
    if (!p.empty()) fail("{}", p);
  ckpt::WeightFiles source(path, {v.file_transposed.begin(), v.file_transposed.end()}, v.tied);
  for (const ParamSlot& s : v.frozen_layout->params) {
    const int64_t i = source.find(s.name);
    if (i < 0) fail("{}: frozen parameter '{}' is not in it", path, s.name);
    if (source.params()[static_cast<size_t>(i)].shape != s.shape)
      fail("{}: frozen parameter '{}' has shape {} in it, the model declares {}", path, s.name,
           shape_text(source.params()[static_cast<size_t>(i)].shape), shape_text(s.shape));
  }
  LocalPartitions local(*v.frozen_layout, comm.rank(), nullptr, nullptr, v.frozen);
  v.frozen->settle();
  local.load_owned(source, {ckpt::kMasterWeights});
  v.frozen->publish();
}
}  // namespace

void load_checkpoint(const std::string& tag_dir, comm::Communicator& comm, const CheckpointView& v) {
  ckpt::Manifest m = ckpt::read_manifest(tag_dir);
  LocalPartitions local = local_partitions(v, comm);
  if (auto problems = mismatches(m, v, local); !problems.empty())
    fail("checkpoint {} does not match this run: {}", tag_dir, fmt::join(problems, "; "));
  verify_files(m, comm);
  const bool log_here = comm.rank() == 0;
  check_data(m, v, log_here);
  if (m.get<uint64_t>("data_sampler.seed") != v.seed && log_here)
    log::warn("checkpoint {} was trained with --seed {}, this run uses {}: the data order after resuming differs",
              tag_dir, m.get<uint64_t>("data_sampler.seed"), v.seed);
  if ((m.zero_stage != v.zero.stage || m.world_size != comm.size()) && log_here)
    log::info(
        "resharding {}: saved by {} rank(s) at ZeRO stage {} ({} parameters), loading into {} rank(s) at stage {} "
        "({} parameters)",
        tag_dir, m.world_size, m.zero_stage, m.params_dtype, comm.size(), v.zero.stage, dtype_name(v.params_dtype));

  const ResumeParts& parts = v.resume;
  const bool optimizer_states = v.master && parts.optimizer_states && !parts.module_only;
  if (v.master && log_here) note_batch_change(m, v, comm.size());
  std::unique_ptr<ckpt::TensorSource> source = ckpt::open_source(m);
  std::vector<std::string> whats{ckpt::kMasterWeights};
  if (optimizer_states) whats.insert(whats.end(), local.states().begin(), local.states().end());
  v.params->settle();
  local.load_owned(*source, whats);
  if (v.frozen) load_frozen(m, v, comm);
  if (!v.master) {  // weights only (--eval_only): the fp32 master went into the parameters
    publish_master(v);
    comm.barrier();
    return;
  }
  if (optimizer_states) {
    for (size_t g = 0; g < v.layout->groups.size(); ++g)
      if (int oi = v.master->optimizer_group(static_cast<int>(g)); oi >= 0)
        v.optimizer->set_step_count(oi, m.optimizer_step);
    restore_scaler(m, v.scaler, log_here);
  } else {
    // DeepSpeed rebuilds the master from the 16-bit module weights when it skips the optimizer
    // state; with 16-bit parameters that is the saved master rounded.
    v.master->write_params();
    v.master->refresh_from_params();
  }
  if (!parts.module_only) {
    if (parts.lr_scheduler_states)
      v.schedule->set_last_batch_iteration(m.get<int64_t>("lr_scheduler.last_batch_iteration"));
    v.counters->global_steps = m.global_steps;
    v.counters->global_samples = m.get<int64_t>("global_samples");
    v.counters->skipped_steps = m.get<int64_t>("skipped_steps");
    v.counters->micro_steps = m.get<int64_t>("micro_steps");
  }
  if (log_here && parts.module_only)
    log::info("--load_module_only: the weights from {}; the optimizer state, loss scaler, LR schedule and counters "
              "start fresh (step 0)", m.tag_dir);
  else if (log_here && !optimizer_states)
    log::info("--no_load_optimizer_states: the optimizer state (step count 0) and loss scaler start fresh, the fp32 "
              "master from the {} weights", dtype_name(v.params_dtype));
  if (log_here && !parts.module_only && !parts.lr_scheduler_states)
    log::info("--no_load_lr_scheduler_states: the LR schedule starts from its first step at global step {}",
              m.global_steps);
  publish_master(v);
  comm.barrier();
}

namespace {
using ckpt::kPeftPrefix;

// What a weight source lacks and holds beyond `slots`, and every misshapen parameter (fails).
struct Fit {
  std::vector<std::string> missing, unused;
};
Fit check_fit(ckpt::TensorSource& source, const std::string& path, const std::vector<const ParamSlot*>& slots,
              const std::set<std::string>& transposed, const std::map<std::string, std::string>& tied,
              const std::string& kind) {
  std::vector<std::string> problems, names, swapped, square;
  std::set<std::string> wanted;
  Fit fit;
  for (const ParamSlot* s : slots) {
    wanted.insert(s->name);
    names.push_back(s->name);
    const int64_t i = source.find(s->name);
    const bool is_transposed = transposed.count(s->name) > 0;
    if (is_transposed && s->shape.size() == 2 && s->shape[0] == s->shape[1]) square.push_back(s->name);
    if (i < 0) {
      fit.missing.push_back(fmt::format("'{}' {}", s->name, shape_text(s->shape)));
      continue;
    }
    const std::vector<int64_t>& shape = source.params()[static_cast<size_t>(i)].shape;
    if (shape == s->shape) continue;
    if (is_transposed && shape.size() == 2 && shape[0] == s->shape[1] && shape[1] == s->shape[0])
      swapped.push_back(fmt::format("'{}' {}", s->name, shape_text({shape[1], shape[0]})));
    else
      problems.push_back(fmt::format("{} '{}' has shape {} in the file{} but the model declares {}", kind, s->name,
                                     shape_text(shape), is_transposed ? " (transposed)" : "", shape_text(s->shape)));
  }
  // A file holds one layout: weights that appear in dscpp's [out, in] order mean its square ones
  // are transposed too, which no shape shows.
  if (!swapped.empty())
    problems.insert(
        problems.begin(),
        fmt::format("it holds {} in dscpp's in-memory [out, in] order where Hugging Face files (and this "
                    "dscpp's) hold [in, out], so its square matrices{} would be read transposed without "
                    "notice; convert the checkpoint it came from again with this dscpp (zero-to-fp32 or "
                    "export-hf), or transpose those tensors in the file",
                    fmt::join(swapped, ", "),
                    square.empty() ? "" : fmt::format(" ({} of them, such as '{}')", square.size(), square[0])));
  for (const ckpt::ParamDesc& t : source.params())
    if (!wanted.count(t.name) && !tied.count(t.name)) {
      const std::string near = config::closest_match(t.name, names);
      fit.unused.push_back(fmt::format("'{}' {}{}", t.name, shape_text(t.shape),
                                       near.empty() ? "" : fmt::format(" (closest {}: '{}')", kind, near)));
    }
  if (!problems.empty()) fail("{} does not fit the model: {}", path, fmt::join(problems, "; "));
  return fit;
}

std::string listed(const std::vector<std::string>& v) {
  constexpr size_t kShown = 8;
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), kShown)));
  return fmt::format("{}{}", fmt::join(head, ", "),
                     v.size() > kShown ? fmt::format(" and {} more", v.size() - kShown) : "");
}
}  // namespace

void load_initial_weights(const InitialWeights& w, comm::Communicator& comm, const CheckpointView& v) {
  // The base weights are every parameter but the adapter's, trained or frozen.
  std::vector<const ParamSlot*> base, adapter;
  for (const FlatLayout* layout : {v.layout, v.frozen_layout})
    if (layout != nullptr)
      for (const ParamSlot& s : layout->params) (s.adapter ? adapter : base).push_back(&s);
  ckpt::WeightFiles source(w.path, w.transposed, w.tied);
  const Fit fit = check_fit(source, w.path, base, w.transposed, w.tied, "parameter");
  if (!w.partial && (!fit.missing.empty() || !fit.unused.empty()))
    fail("{} does not fit the model:{}{} (a model that starts from part of a file says so: init_partial)", w.path,
         fit.missing.empty() ? ""
                             : fmt::format(" {} parameter(s) missing: {};", fit.missing.size(), listed(fit.missing)),
         fit.unused.empty()
             ? ""
             : fmt::format(" {} tensor(s) the model does not use: {}", fit.unused.size(), listed(fit.unused)));
  if (comm.rank() == 0) {
    if (!fit.missing.empty())
      log::warn("{}: {} parameter(s) not in the file keep their initial values: {}", w.path, fit.missing.size(),
                listed(fit.missing));
    if (!fit.unused.empty()) log::warn("{}: {} tensor(s) not used: {}", w.path, fit.unused.size(), listed(fit.unused));
  }
  // An adapter (PEFT's file): exactly the adapter parameters, under PEFT's names.
  std::optional<ckpt::WeightFiles> adapter_source;
  if (!w.adapter_from.empty()) {
    std::map<std::string, std::string> peft_names;
    for (const ParamSlot* s : adapter) peft_names[kPeftPrefix + s->name] = s->name;
    adapter_source.emplace(w.adapter_from, std::set<std::string>{}, peft_names);
    const Fit a = check_fit(*adapter_source, w.adapter_from, adapter, {}, peft_names, "adapter parameter");
    if (!a.missing.empty() || !a.unused.empty())
      fail("{} is not an adapter of this model:{}{} (adapter tensors are named '{}' + the parameter's name)",
           w.adapter_from,
           a.missing.empty()
               ? ""
               : fmt::format(" {} adapter parameter(s) missing: {};", a.missing.size(), listed(a.missing)),
           a.unused.empty() ? ""
                            : fmt::format(" {} tensor(s) the model has no adapter parameter for: {}", a.unused.size(),
                                          listed(a.unused)),
           kPeftPrefix);
  }
  LocalPartitions local = local_partitions(v, comm);
  v.params->settle();
  local.load_owned(source, {ckpt::kMasterWeights}, /*skip_missing=*/true);
  if (adapter_source) local.load_owned(*adapter_source, {ckpt::kMasterWeights}, /*skip_missing=*/true);
  if (v.frozen) {
    LocalPartitions frozen(*v.frozen_layout, comm.rank(), nullptr, nullptr, v.frozen);
    v.frozen->settle();
    frozen.load_owned(source, {ckpt::kMasterWeights}, /*skip_missing=*/true);
    v.frozen->publish();
  }
  publish_master(v);
}

}  // namespace dscpp::runtime
