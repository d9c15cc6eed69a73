#include "checkpoint/export_hf.h"

#include "checkpoint/checksums.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/lora.h"
#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace dscpp::ckpt {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << text;
    if (!out.flush()) fail("{}: cannot write: {}", partial, std::strerror(errno));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0)
    fail("cannot rename {} to {}: {}", partial, path, std::strerror(errno));
}

const char* torch_dtype(DType d) { return d == DType::bf16 ? "bfloat16" : d == DType::f16 ? "float16" : "float32"; }

template <typename Json>
Json parse_json(const std::string& text, const std::string& path) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not JSON: {}", path, e.what());
  }
}

// <tag>/<file>, checked against the digest the manifest records at `digest_key`.
std::string checked_text(const Manifest& m, const std::string& file, const std::string& digest_key) {
  std::string text = read_text(m.tag_dir + "/" + file);
  if (m.doc.value(digest_key, std::string()) != sha256_hex(text))
    fail("checkpoint {}: {} does not match the digest recorded at save (changed or damaged since)", m.tag_dir, file);
  return text;
}

// The checkpoint's PEFT adapter_config.json (checked), for `flag` (--adapter, --merge) to use.
std::string adapter_config_text(const Manifest& m, const char* flag) {
  if (adapter_params(m).empty())
    fail(
        "checkpoint {} has no adapter parameters (its manifest lists no adapter_params): export-hf {} needs a "
        "model trained with a LoRA adapter; export it without {}",
        m.tag_dir, flag, flag);
  if (!m.doc.contains("adapter_config"))
    fail("checkpoint {} has adapter parameters but no {}: the run that saved it gave none", m.tag_dir,
         kAdapterConfigFile);
  return checked_text(m, kAdapterConfigFile, "adapter_config_sha256");
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("export-hf: cannot create {}: {}", dir, ec.message());
}

// PEFT's adapter directory, as PeftModel.save_pretrained writes it and from_pretrained reads it.
ExportResult write_adapter(CheckpointReader& reader, const std::string& out_dir, const ExportOptions& o) {
  if (!o.config.empty()) fail("export-hf: --config is a model's config.json; an adapter directory has none");
  const Manifest& m = reader.manifest();
  std::string config_text = adapter_config_text(m, "--adapter");
  if (!o.base_model.empty()) {
    auto config = parse_json<nlohmann::ordered_json>(config_text, m.tag_dir + "/" + kAdapterConfigFile);
    config["base_model_name_or_path"] = o.base_model;
    config_text = config.dump(2) + "\n";
  }
  const std::vector<std::string> names = adapter_params(m);
  const std::set<std::string> adapters(names.begin(), names.end());
  for (size_t i = 0; i < reader.params().size(); ++i)
    if (!adapters.count(reader.params()[i].name)) reader.leave_out(i);
  const std::set<std::string> transposed = HfNames::of(m).transposed;
  ExportResult r;
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : names) {
    const int64_t i = reader.find(name);
    if (i < 0) fail("checkpoint {}: adapter parameter '{}' is listed but not saved", m.tag_dir, name);
    tensors.push_back(reader.tensor(static_cast<size_t>(i), kPeftPrefix + name, o.dtype, transposed.count(name) > 0));
    r.bytes += reader.params()[static_cast<size_t>(i)].numel * static_cast<int64_t>(dtype_size(o.dtype));
  }
  make_dir(out_dir);
  write_whole(out_dir + "/" + kAdapterWeightsFile, tensors, {{"format", "pt"}});
  write_text(out_dir + "/" + kAdapterConfigFile, config_text);
  r.files = {kAdapterWeightsFile, kAdapterConfigFile};
  r.adapters = names.size();
  return r;
}

// The model's config.json and weights; `merge` (optional) folds the LoRA pairs in.
ExportResult write_model(CheckpointReader& reader, const std::string& out_dir, const ExportOptions& o,
                         const LoraMerge* merge) {
  const Manifest& m = reader.manifest();
  const std::string tag = reader.result().tag_dir;

  // The config: the checkpoint's (checked against the digest recorded with it) or the caller's.
  std::string config_text;
  if (!o.config.empty()) {
    config_text = read_text(o.config);
  } else {
    if (!m.doc.contains("export_config"))
      fail("checkpoint {} has no config.json: the model that saved it gave none (the shipped model families "
           "do); give one with --config FILE",
           tag);
    config_text = checked_text(m, kExportConfigFile, "export_config_sha256");
  }
  auto config =
      parse_json<nlohmann::ordered_json>(config_text, o.config.empty() ? tag + "/" + kExportConfigFile : o.config);
  config["torch_dtype"] = torch_dtype(o.dtype);
  const std::set<std::string> transposed = HfNames::of(m).transposed;

  // Shards in the reader's order, each up to max_shard_bytes (a larger tensor alone in its shard).
  const int64_t elem = static_cast<int64_t>(dtype_size(o.dtype));
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0;
  for (size_t i = 0; i < reader.params().size(); ++i) {
    if (merge && merge->is_adapter(reader.params()[i].name)) {
      reader.leave_out(i);
      continue;
    }
    const int64_t bytes = reader.params()[i].numel * elem;
    if (!shards.back().empty() && in_shard + bytes > o.max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(i);
    in_shard += bytes;
  }
  make_dir(out_dir);

  ExportResult r;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  // A shared parameter under its owner's name only, as transformers' save_pretrained keeps it.
  const std::map<std::string, std::string> meta{{"format", "pt"}, {kLayoutKey, kHfLayout}};
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1
                                 ? "model.safetensors"
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    std::vector<TensorToWrite> tensors;
    for (size_t i : shards[s]) {
      const ParamDesc& d = reader.params()[i];
      tensors.push_back(reader.tensor(i, d.name, o.dtype, transposed.count(d.name) > 0,
                                      merge ? merge->adjust(d.name) : CheckpointReader::Adjust{}));
      weight_map[d.name] = file;
      r.bytes += d.numel * elem;
    }
    write_whole(out_dir + "/" + file, tensors, meta);
    r.files.push_back(file);
  }
  if (shards.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", r.bytes}}}, {"weight_map", weight_map}};
    write_text(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n");
    r.files.push_back("model.safetensors.index.json");
  }
  write_text(out_dir + "/" + kExportConfigFile, config.dump(2) + "\n");
  r.files.push_back(kExportConfigFile);
  r.merged = merge ? merge->pairs() : 0;
  r.adapters = adapter_params(m).size();
  return r;
}

}  // namespace

ExportResult export_hf(const std::string& ckpt, const std::string& out_dir, const ExportOptions& o,
                       const std::function<void(const ConsolidateProgress&)>& progress) {
  if (o.dtype != DType::f32 && o.dtype != DType::bf16 && o.dtype != DType::f16)
    fail("export-hf: dtype {} is not one transformers stores weights in (fp32, bf16, fp16)", dtype_name(o.dtype));
  if (o.max_shard_bytes <= 0) fail("export-hf: the shard size must be positive, not {}", o.max_shard_bytes);
  if (!o.base_model.empty() && o.kind != ExportKind::adapter)
    fail("export-hf: --base names the base model of an adapter directory (--adapter)");
  // An adapter's matrices all train: the frozen base model is not read.
  CheckpointReader reader(ckpt, kMasterWeights, progress, o.kind != ExportKind::adapter);
  ExportResult r;
  if (o.kind == ExportKind::adapter) {
    r = write_adapter(reader, out_dir, o);
  } else if (o.kind == ExportKind::merged) {
    const Manifest& m = reader.manifest();
    const std::string path = m.tag_dir + "/" + kAdapterConfigFile;
    const LoraMerge merge(reader, parse_json<nlohmann::json>(adapter_config_text(m, "--merge"), path), path);
    r = write_model(reader, out_dir, o, &merge);
  } else {
    r = write_model(reader, out_dir, o, nullptr);
  }
  r.read = reader.result();
  return r;
}

}  // namespace dscpp::ckpt
