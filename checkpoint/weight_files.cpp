#include "checkpoint/weight_files.h"

#include "checkpoint/hf_layout.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/torch_file.h"
#include "core/error.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

namespace dscpp::ckpt {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
std::string dir_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

// The shard files an index names, in the order of its weight_map's first mention of each.
std::vector<std::string> shards_of(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) fail("{}: cannot open: {}", index_path, std::strerror(errno));
  nlohmann::ordered_json root;
  try {
    root = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not JSON: {}", index_path, e.what());
  }
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object())
    fail("{}: expected an object \"weight_map\" (tensor name → shard file), found {}", index_path,
         map == root.end() ? "none" : map->type_name());
  std::vector<std::string> shards;
  for (const auto& [name, file] : map->items()) {
    const std::string f = file.is_string() ? file.get<std::string>() : std::string();
    if (f.empty() || f.find('/') != std::string::npos)
      fail("{}: weight_map[\"{}\"] should name a shard file beside the index, found {}", index_path, name, file.dump());
    if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
  }
  if (shards.empty()) fail("{}: weight_map is empty", index_path);
  return shards;
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

}  // namespace

class WeightFiles::Shard {
 public:
  virtual ~Shard() = default;
  virtual std::vector<Entry> entries() const = 0;
  virtual void read(const std::string& key, int64_t first, int64_t count, float* dst) = 0;
  // Whether an older dscpp wrote it, in its own unsaid layout.
  virtual bool old_dscpp() const { return false; }
};

namespace {

class SafetensorsShard final : public WeightFiles::Shard {
 public:
  explicit SafetensorsShard(const std::string& path) : file_(path) {}
  std::vector<Entry> entries() const override {
    std::vector<Entry> out;
    for (const TensorInfo& t : file_.tensors()) out.push_back(Entry{t.name, t.shape, t.numel});
    return out;
  }
  void read(const std::string& key, int64_t first, int64_t count, float* dst) override {
    file_.read(key, first, count, dst, DType::f32);
  }
  bool old_dscpp() const override { return written_by_old_dscpp(file_); }

 private:
  SafetensorsFile file_;
};

// transformers writes pytorch_model.bin in its own layout, as it writes safetensors.
class TorchShard final : public WeightFiles::Shard {
 public:
  explicit TorchShard(const std::string& path) : file_(path) {}
  std::vector<Entry> entries() const override {
    std::vector<Entry> out;
    for (const TorchFile::Tensor& t : file_.tensors()) out.push_back(Entry{t.name, t.shape, t.numel});
    return out;
  }
  void read(const std::string& key, int64_t first, int64_t count, float* dst) override {
    file_.read(key, first, count, dst);
  }

 private:
  TorchFile file_;
};

std::unique_ptr<WeightFiles::Shard> open_shard(const std::string& path) {
  if (is_torch_file(path)) return std::make_unique<TorchShard>(path);
  return std::make_unique<SafetensorsShard>(path);
}

}  // namespace

WeightFiles::WeightFiles(const std::string& path, std::set<std::string> transposed,
                         const std::map<std::string, std::string>& tied)
    : path_(path), transposed_(std::move(transposed)) {
  for (const auto& [alias, owner] : tied)
    if (transposed_.count(owner)) transposed_.insert(alias);  // one tensor, one orientation
  std::string index;
  if (is_dir(path)) {
    // Safetensors first, as transformers prefers it; of two safetensors forms, the index, as
    // dscpp has always read them.
    if (is_file(path + "/model.safetensors.index.json")) index = path + "/model.safetensors.index.json";
    else if (is_file(path + "/model.safetensors")) file_paths_.push_back(path + "/model.safetensors");
    else if (is_file(path + "/pytorch_model.bin")) file_paths_.push_back(path + "/pytorch_model.bin");
    else if (is_file(path + "/pytorch_model.bin.index.json")) index = path + "/pytorch_model.bin.index.json";
    else
      fail("{}: a weights directory needs model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
           "pytorch_model.bin.index.json; it has none of them",
           path);
  } else if (ends_with(path, ".json")) {
    index = path;
  } else {
    file_paths_.push_back(path);
  }
  if (!index.empty())
    for (const std::string& shard : shards_of(index)) file_paths_.push_back(dir_of(index) + "/" + shard);
  std::map<std::string, size_t> seen;  // tensor name → index into params_
  for (const std::string& f : file_paths_) {
    files_.push_back(open_shard(f));
    const bool old_layout = files_.back()->old_dscpp();
    for (const Entry& t : files_.back()->entries()) {
      if (auto it = seen.find(t.name); it != seen.end())
        fail("{}: tensor '{}' is in two shards, {} and {}", path, t.name, file_paths_[file_of_[it->second]], f);
      if (old_layout && transposed_.count(t.name))
        fail("{}: an older dscpp wrote this file, with '{}' (and every weight Hugging Face stores as [in, out]) in "
             "dscpp's own [out, in] order and nothing in the file saying so; a square one cannot be told from "
             "Hugging Face's order by its shape, so the file is not read. Write it again with this dscpp (dscpp "
             "zero-to-fp32 or export-hf of the checkpoint), which stores Hugging Face's order and says so",
             f, t.name);
      seen[t.name] = params_.size();
      params_.push_back(ParamDesc{t.name, t.shape, t.numel, 0});
      file_of_.push_back(files_.size() - 1);
      key_.push_back(t.name);
    }
  }
  for (const auto& [alias, owner] : tied) {
    auto a = seen.find(alias), o = seen.find(owner);
    if (a == seen.end()) continue;
    if (o == seen.end()) {  // the file names the shared parameter by its other name only
      params_[a->second].name = owner;
      continue;
    }
    const ParamDesc &pa = params_[a->second], &po = params_[o->second];
    if (pa.shape != po.shape)
      fail("{}: '{}' and '{}' are one shared parameter of the model, but the file holds them with different shapes; "
           "keep one of the two names (either will do)",
           path, alias, owner);
    // Chunk by chunk, so no more than two chunks are held whatever the size.
    constexpr int64_t kChunk = 1 << 20;
    std::vector<float> va, vo;
    for (int64_t first = 0; first < pa.numel; first += kChunk) {
      const int64_t n = std::min(kChunk, pa.numel - first);
      va.resize(static_cast<size_t>(n)), vo.resize(static_cast<size_t>(n));
      files_[file_of_[a->second]]->read(alias, first, n, va.data());
      files_[file_of_[o->second]]->read(owner, first, n, vo.data());
      for (int64_t e = 0; e < n; ++e)
        if (va[static_cast<size_t>(e)] != vo[static_cast<size_t>(e)])
          fail("{}: '{}' and '{}' are one shared parameter of the model, but the file holds different values under "
               "the two names (element {}: {} and {}); it was not saved from this model's tied weights. Keep the "
               "one to start from (a file may hold either name or both), or untie them in the model's config",
               path, alias, owner, first + e, va[static_cast<size_t>(e)], vo[static_cast<size_t>(e)]);
    }
  }
  for (ParamDesc& p : params_) {
    if (!transposed_.count(p.name)) continue;
    if (p.shape.size() != 2)
      fail("{}: tensor '{}' has shape of {} dimensions, but the model reads it as a transposed matrix", path, p.name,
           p.shape.size());
    std::swap(p.shape[0], p.shape[1]);
  }
}

WeightFiles::~WeightFiles() = default;

void WeightFiles::read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) {
  if (what != kMasterWeights) fail("{}: holds weights only, no optimizer state '{}'", path_, what);
  const ParamDesc& p = params_.at(param);
  Shard& file = *files_[file_of_[param]];
  const std::string& key = key_[param];
  if (!transposed_.count(p.name)) return file.read(key, first, count, dst);
  transposed_reader_.read(&file, key, p.shape[0], p.shape[1], first, count, dst,
                          [&](float* whole) { file.read(key, 0, p.numel, whole); });
}

}  // namespace dscpp::ckpt
