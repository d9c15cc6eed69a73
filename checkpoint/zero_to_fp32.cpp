#include "checkpoint/zero_to_fp32.h"

#include "checkpoint/hf_layout.h"
#include "core/error.h"

#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

namespace dscpp::ckpt {

CheckpointReader::CheckpointReader(const std::string& ckpt, const std::string& what,
                                   std::function<void(const ConsolidateProgress&)> progress, bool with_frozen)
    : what_(what), progress_(std::move(progress)) {
  result_.tag_dir = resolve_tag_dir(ckpt);
  manifest_ = read_manifest(result_.tag_dir);
  result_.zero_stage = manifest_.zero_stage;
  result_.world_size = manifest_.world_size;
  result_.global_steps = manifest_.global_steps;
  // Every file against the digests recorded at save, before anything is converted.
  for (const std::string& f : manifest_.files)
    if (std::string problem = verify_file(manifest_, f); !problem.empty()) fail("{}", problem);
  result_.verified = !manifest_.checksums.empty();
  source_ = open_source(manifest_);
  if (!source_->has(what))
    fail("checkpoint {}: it has no '{}' (it has the master weights '{}' and the optimizer states [{}])",
         result_.tag_dir, what, kMasterWeights, fmt::join(manifest_.optimizer_states, ", "));
  for (const ParamDesc& d : manifest_.layout.params) {
    const int64_t index = source_->find(d.name);
    if (index < 0)
      fail("checkpoint {}: parameter '{}' is in the manifest but not in {}", result_.tag_dir, d.name,
           source_->description());
    if (source_->params()[static_cast<size_t>(index)].shape != d.shape)
      fail("checkpoint {}: parameter '{}' has another shape in {} than in the manifest", result_.tag_dir, d.name,
           source_->description());
    add(d, *source_, static_cast<size_t>(index));
  }
  // Frozen parameters never had an optimizer state.
  if (with_frozen && what == kMasterWeights && manifest_.has("frozen")) open_frozen();
  done_.tensors_total = params_.size();
  for (const ParamDesc& d : params_) done_.bytes_total += d.numel * 4;
  written_.assign(params_.size(), false);
}

void CheckpointReader::open_frozen() {
  const std::string file = manifest_.get<std::string>("frozen.file");
  // The one name this dscpp writes: a manifest naming another file is not one it can vouch for.
  if (file != kFrozenFile)
    fail("checkpoint {}: {}: frozen.file is '{}', expected '{}'", result_.tag_dir, kManifestFile, file, kFrozenFile);
  if (!manifest_.checksums.empty() && !manifest_.checksums.count(file))
    fail("checkpoint {}: {}: files.sha256 has no digests for {}", result_.tag_dir, kManifestFile, file);
  if (std::string problem = verify_file(manifest_, file); !problem.empty()) fail("{}", problem);
  // The file holds Hugging Face's layout (and says so): the source serves memory's.
  frozen_source_ =
      std::make_unique<NamedTensorSource>(result_.tag_dir + "/" + file, "", HfNames::of(manifest_).transposed);
  for (const std::string& name : manifest_.get<std::vector<std::string>>("frozen.params")) {
    const int64_t index = frozen_source_->find(name);
    if (index < 0) fail("checkpoint {}: frozen parameter '{}' is not in {}", result_.tag_dir, name, file);
    if (find(name) >= 0)
      fail("checkpoint {}: parameter '{}' is both trained (the manifest's layout) and frozen", result_.tag_dir, name);
    add(frozen_source_->params()[static_cast<size_t>(index)], *frozen_source_, static_cast<size_t>(index));
  }
}

void CheckpointReader::add(const ParamDesc& d, TensorSource& source, size_t index) {
  index_[d.name] = params_.size();
  params_.push_back(d);
  where_.emplace_back(&source, index);
}

int64_t CheckpointReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

void CheckpointReader::read(size_t i, int64_t first, int64_t count, float* dst) {
  auto [source, index] = where_.at(i);
  source->read(index, what_, first, count, dst);
}

void CheckpointReader::leave_out(size_t i) {
  --done_.tensors_total;
  done_.bytes_total -= params_.at(i).numel * 4;
}

TensorToWrite CheckpointReader::tensor(size_t i, const std::string& name, DType dtype, bool transposed, Adjust adjust) {
  const ParamDesc& d = params_.at(i);
  if (transposed && d.shape.size() != 2)
    fail("checkpoint {}: parameter '{}' is marked transposed but has {} dimensions", result_.tag_dir, d.name,
         d.shape.size());
  std::vector<int64_t> shape = d.shape;
  if (transposed) std::swap(shape[0], shape[1]);
  // The constructor counted each parameter once: another tensor of it (a shared parameter's other
  // name) adds to the totals.
  if (written_[i]) ++done_.tensors_total, done_.bytes_total += d.numel * 4;
  written_[i] = true;
  TensorToWrite t{name, dtype, shape, nullptr, {}};
  const int64_t numel = d.numel, rows = d.shape.empty() ? 0 : d.shape[0];
  t.fill = [this, i, numel, rows, dtype, transposed, adjust = std::move(adjust)](int64_t first, int64_t count,
                                                                                 void* dst) {
    float* f32 = dtype == DType::f32 ? static_cast<float*>(dst) : nullptr;
    if (!f32) chunk_.resize(static_cast<size_t>(count)), f32 = chunk_.data();
    if (transposed || adjust) {
      if (first == 0) {  // the writer asks in order: the whole parameter once, at its start
        staged_.assign(static_cast<size_t>(numel), 0.0f);
        read(i, 0, numel, staged_.data());
        if (adjust) adjust(staged_);
      }
      // Element (c, r) of the file's [cols, rows] is memory's (r, c).
      const int64_t cols = transposed ? numel / rows : 0;
      for (int64_t e = first; e < first + count; ++e)
        f32[e - first] = staged_[static_cast<size_t>(transposed ? (e % rows) * cols + e / rows : e)];
      if (first + count == numel) std::vector<float>().swap(staged_);
    } else {
      read(i, first, count, f32);
    }
    if (dtype != DType::f32) convert(f32, DType::f32, dst, dtype, static_cast<size_t>(count));
    done_.bytes_done += count * 4;
    if (first + count == numel) {
      ++done_.tensors_done;
      if (progress_) progress_(done_);
    }
  };
  result_.numel += d.numel;
  ++result_.tensors;
  if (frozen(i)) ++result_.frozen;
  if (d.numel == 0) ++done_.tensors_done;  // written without a fill call
  return t;
}

FileDigests write_whole(const std::string& out, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  const std::string partial = out + ".partial";
  FileDigests digests;
  try {
    digests = write_safetensors(partial, tensors, metadata);
  } catch (...) {
    std::remove(partial.c_str());
    throw;
  }
  if (std::rename(partial.c_str(), out.c_str()) != 0)
    fail("cannot rename {} to {}: {}", partial, out, std::strerror(errno));
  return digests;
}

ConsolidateResult zero_to_fp32(const std::string& ckpt, const std::string& out,
                               const std::function<void(const ConsolidateProgress&)>& progress,
                               const std::string& what) {
  CheckpointReader reader(ckpt, what, progress);
  const Manifest& m = reader.manifest();
  // Hugging Face's layout and every name of a shared parameter (hf_layout.h); a shared one's
  // other names are read again from the checkpoint rather than held.
  const HfNames hf = HfNames::of(m);
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < reader.params().size(); ++i) {
    const std::string& name = reader.params()[i].name;
    tensors.push_back(reader.tensor(i, name, DType::f32, hf.transposed.count(name) > 0));
    for (const std::string& alias : hf.aliases_of(name))
      tensors.push_back(reader.tensor(i, alias, DType::f32, hf.transposed.count(name) > 0));
  }
  // "format": "pt" is what Hugging Face loaders expect of a weights file; the rest says how the
  // file is laid out and where the weights came from.
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {kLayoutKey, kHfLayout},
                                          {"dscpp_checkpoint", reader.result().tag_dir},
                                          {"global_steps", std::to_string(m.global_steps)},
                                          {"zero_stage", std::to_string(m.zero_stage)},
                                          {"world_size", std::to_string(m.world_size)},
                                          {"tensor", what}};
  write_whole(out, tensors, meta);
  return reader.result();
}

}  // namespace dscpp::ckpt
