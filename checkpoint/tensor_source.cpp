#include "checkpoint/tensor_source.h"

#include "checkpoint/hf_layout.h"
#include "core/error.h"

#include <algorithm>

namespace dscpp::ckpt {

int64_t TensorSource::find(const std::string& name) const {
  if (index_.empty())
    for (size_t i = 0; i < params().size(); ++i) index_.emplace(params()[i].name, i);
  auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

// ---- by name ----------------------------------------------------------------------------------

NamedTensorSource::NamedTensorSource(const std::string& weights, const std::string& optimizer,
                                     const std::set<std::string>& transposed)
    : weights_(weights) {
  if (!optimizer.empty()) optimizer_ = std::make_unique<SafetensorsFile>(optimizer);
  if (holds_hf_layout(weights_)) transposed_ = transposed;
  for (const TensorInfo& t : weights_.tensors()) {
    std::vector<int64_t> shape = t.shape;
    if (transposed_.count(t.name)) {
      if (shape.size() != 2)
        fail("{}: tensor '{}' has {} dimensions, but the checkpoint says it is a matrix stored transposed", weights,
             t.name, shape.size());
      std::swap(shape[0], shape[1]);
    }
    params_.push_back(ParamDesc{t.name, shape, t.numel, 0});
  }
}

void NamedTensorSource::read_file(const SafetensorsFile& f, const std::string& key, size_t param, int64_t first,
                                  int64_t count, float* dst) {
  const ParamDesc& p = params_.at(param);
  if (!transposed_.count(p.name)) return f.read(key, first, count, dst, DType::f32);
  transposed_reader_.read(f, key, p.shape[0], p.shape[1], first, count, dst);
}

bool NamedTensorSource::has(const std::string& what) const {
  if (what == kMasterWeights) return true;
  if (!optimizer_) return false;
  return std::any_of(params_.begin(), params_.end(),
                     [&](const ParamDesc& p) { return optimizer_->find(p.name + "/" + what) != nullptr; });
}

void NamedTensorSource::read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) {
  const std::string& name = params_.at(param).name;
  if (what == kMasterWeights) return read_file(weights_, name, param, first, count, dst);
  if (!optimizer_) fail("{}: holds weights only, no optimizer state '{}'", weights_.path(), what);
  const std::string key = name + "/" + what;
  if (!optimizer_->find(key)) fail("{}: optimizer state '{}' is missing", optimizer_->path(), key);
  read_file(*optimizer_, key, param, first, count, dst);
}

// ---- partitions -------------------------------------------------------------------------------

PartitionedTensorSource::PartitionedTensorSource(const Manifest& manifest)
    : manifest_(manifest), files_(manifest.files.size()) {
  if (manifest.storage != Storage::partitions) fail("checkpoint {}: not a partitioned checkpoint", manifest.tag_dir);
}

bool PartitionedTensorSource::has(const std::string& what) const {
  return what == kMasterWeights || std::find(manifest_.optimizer_states.begin(), manifest_.optimizer_states.end(),
                                             what) != manifest_.optimizer_states.end();
}

const SafetensorsFile& PartitionedTensorSource::rank_file(int rank) {
  auto& f = files_.at(static_cast<size_t>(rank));
  if (f) return *f;
  f = std::make_unique<SafetensorsFile>(manifest_.tag_dir + "/" + manifest_.files[static_cast<size_t>(rank)]);
  // The file must be the one the manifest describes: its rank, its world, its lengths.
  const auto& meta = f->metadata();
  auto meta_is = [&](const char* key, int64_t want) {
    auto it = meta.find(key);
    if (it == meta.end() || it->second != std::to_string(want))
      fail("{}: metadata '{}' is '{}', the manifest expects {} (a file from another save?)", f->path(), key,
           it == meta.end() ? "<missing>" : it->second, want);
  };
  meta_is("rank", rank);
  meta_is("world_size", manifest_.world_size);
  meta_is("global_steps", manifest_.global_steps);
  std::vector<std::string> wanted{kMasterWeights};
  wanted.insert(wanted.end(), manifest_.optimizer_states.begin(), manifest_.optimizer_states.end());
  for (const std::string& what : wanted) {
    const TensorInfo* t = f->find(what);
    if (!t) fail("{}: tensor '{}' is missing", f->path(), what);
    if (t->dtype != DType::f32 || t->numel != manifest_.layout.part_total)
      fail("{}: tensor '{}' is {} with {} elements, the manifest's layout expects F32 with {}", f->path(), what,
           dtype_name(t->dtype), t->numel, manifest_.layout.part_total);
  }
  return *f;
}

void PartitionedTensorSource::read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) {
  if (!has(what)) fail("checkpoint {}: it holds no optimizer state '{}'", manifest_.tag_dir, what);
  for (const Fragment& f : fragments(manifest_.layout, param, first, count))
    rank_file(f.rank).read(what, f.part_at, f.count, dst + (f.param_first - first), DType::f32);
}

std::unique_ptr<TensorSource> open_source(const Manifest& manifest) {
  if (manifest.storage == Storage::partitions) return std::make_unique<PartitionedTensorSource>(manifest);
  return std::make_unique<NamedTensorSource>(manifest.tag_dir + "/" + manifest.files.at(0),
                                             manifest.tag_dir + "/" + manifest.files.at(1),
                                             HfNames::of(manifest).transposed);
}

}  // namespace dscpp::ckpt
