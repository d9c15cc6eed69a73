#include "checkpoint/export_hf.h"

#include "checkpoint/checksums.h"
#include "checkpoint/hf_layout.h"
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

}  // namespace

ExportResult export_hf(const std::string& ckpt, const std::string& out_dir, const ExportOptions& o,
                       const std::function<void(const ConsolidateProgress&)>& progress) {
  if (o.dtype != DType::f32 && o.dtype != DType::bf16 && o.dtype != DType::f16)
    fail("export-hf: dtype {} is not one transformers stores weights in (fp32, bf16, fp16)", dtype_name(o.dtype));
  if (o.max_shard_bytes <= 0) fail("export-hf: the shard size must be positive, not {}", o.max_shard_bytes);
  CheckpointReader reader(ckpt, kMasterWeights, progress);
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
    config_text = read_text(tag + "/" + kExportConfigFile);
    if (m.doc.value("export_config_sha256", std::string()) != sha256_hex(config_text))
      fail("checkpoint {}: {} does not match the digest recorded at save (changed or damaged since)", tag,
           kExportConfigFile);
  }
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(config_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not JSON: {}", o.config.empty() ? tag + "/" + kExportConfigFile : o.config, e.what());
  }
  config["torch_dtype"] = torch_dtype(o.dtype);
  const std::set<std::string> transposed = HfNames::of(m).transposed;

  // Shards in manifest order, each up to max_shard_bytes (a larger tensor alone in its shard).
  const int64_t elem = static_cast<int64_t>(dtype_size(o.dtype));
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0;
  for (size_t i = 0; i < m.layout.params.size(); ++i) {
    const int64_t bytes = m.layout.params[i].numel * elem;
    if (!shards.back().empty() && in_shard + bytes > o.max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(i);
    in_shard += bytes;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) fail("export-hf: cannot create {}: {}", out_dir, ec.message());

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
      const ParamDesc& d = m.layout.params[i];
      tensors.push_back(reader.tensor(i, d.name, o.dtype, transposed.count(d.name) > 0));
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
  r.read = reader.result();
  return r;
}

}  // namespace dscpp::ckpt
