// A checkpoint's manifest.json: what was saved, by whom, and where every element lives.
//
//   <tag>/manifest.json                    written by rank 0
//   stage 0:    <tag>/model.safetensors    fp32 master weights by parameter name (rank 0)
//               <tag>/optimizer.safetensors  optimizer state by "<param>/<state>" (rank 0)
//   stages 1–3: <tag>/zero_pp_rank_<R>_partitions.safetensors, one per rank R, each holding
//               that rank's concatenated partitions (layout.part_total fp32 elements) of the
//               master weights (tensor "fp32") and of every optimizer state ("exp_avg", ...)
//
// The manifest records the whole partition layout (groups and parameters with their flat
// offsets), so any reader can find elements [a, b) of any parameter without the model, and a
// run with another world size or stage can reshard. The fields this library reads are typed
// below; the engine's own fields (counters, schedule, sampler, loss scaler, batch sizes, the
// config) travel in `doc` and are read back through get().
//
// Format version 2. Version 1 (stage 0 only, before ZeRO checkpoints) is refused by name.
#pragma once

#include "checkpoint/checksums.h"
#include "checkpoint/partition_layout.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dscpp::ckpt {

inline constexpr int kFormatVersion = 2;
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
// The frozen parameters (no master, no optimizer state), by name in the run's parameter dtype and
// Hugging Face's layout; the manifest's "frozen" says so and lists them, its digests cover it.
inline constexpr const char* kFrozenFile = "frozen.safetensors";
// PEFT's adapter_config.json of the adapter parameters (the manifest's "adapter_params").
inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
// The `what` of the fp32 master weights (the other `what`s are optimizer state names).
inline constexpr const char* kMasterWeights = "fp32";
// The manifest's own SHA-256: of its compact JSON dump without this key (keys sorted, as
// nlohmann::json keeps them), checked last by read_manifest.
inline constexpr const char* kSelfDigest = "manifest_sha256";

// "zero_pp_rank_<R>_partitions.safetensors"
std::string rank_file_name(int rank);

enum class Storage { by_name, partitions };

struct Manifest {
  std::string tag_dir;  // where it was read from (empty when being written)
  int zero_stage = 0;
  int world_size = 1;
  std::string params_dtype = "fp32";  // the run's parameter storage dtype (informative: fp32 master is saved)
  int64_t global_steps = 0;
  PartitionLayout layout;
  std::string optimizer_type;
  std::vector<std::string> optimizer_states;  // state names every optimizer group has
  int64_t optimizer_step = 0;                 // step count of every optimizer group
  Storage storage = Storage::by_name;
  std::vector<std::string> files;  // by_name: {model, optimizer}; partitions: one per rank
  // files.sha256: every file of the tag (`files` and model_16bit/model.safetensors when saved) →
  // its digests (checksums.h). Empty in checkpoints saved before dscpp recorded them.
  std::map<std::string, FileDigests> checksums;
  nlohmann::json doc;              // the whole document, including the engine's own fields

  // The value at a dotted key ("lr_scheduler.last_batch_iteration"), converted to T; throws
  // dscpp::Error naming the manifest and the key when it is missing or of another type.
  template <typename T>
  T get(const std::string& key) const {
    const nlohmann::json& v = at(key);
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw_bad_type(key, v);
    }
  }
  const nlohmann::json& at(const std::string& key) const;
  bool has(const std::string& key) const;
  std::string path() const;  // <tag_dir>/manifest.json

 private:
  [[noreturn]] void throw_bad_type(const std::string& key, const nlohmann::json& v) const;
};

// The JSON document: `m.doc` (the engine's fields) with the typed fields written over it.
nlohmann::json manifest_json(const Manifest& m);

// Reads and checks <tag_dir>/manifest.json: format and version, the typed fields, the
// layout's consistency (partition_layout.h validate) and the file list. Every error names the
// file and the key.
Manifest read_manifest(const std::string& tag_dir);

// Checks <tag_dir>/<file> against the digests files.sha256 recorded at save: "" when it matches
// (or when the manifest records none), else what differs, naming the file and the tensor.
std::string verify_file(const Manifest& m, const std::string& file);

// `path` is a tag directory (it has a manifest.json) or a save directory (its `latest` names
// the tag). Returns the tag directory; throws dscpp::Error saying which of the two was
// expected when it is neither.
std::string resolve_tag_dir(const std::string& path);

}  // namespace dscpp::ckpt
