#include "checkpoint/zero_to_fp32.h"

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_source.h"
#include "core/error.h"

#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

namespace dscpp::ckpt {

ConsolidateResult zero_to_fp32(const std::string& ckpt, const std::string& out,
                               const std::function<void(const ConsolidateProgress&)>& progress,
                               const std::string& what) {
  ConsolidateResult r;
  r.tag_dir = resolve_tag_dir(ckpt);
  Manifest m = read_manifest(r.tag_dir);
  r.zero_stage = m.zero_stage;
  r.world_size = m.world_size;
  r.global_steps = m.global_steps;
  // Every file against the digests recorded at save, before anything is converted.
  for (const std::string& f : m.files)
    if (std::string problem = verify_file(m, f); !problem.empty()) fail("{}", problem);
  r.verified = !m.checksums.empty();
  std::unique_ptr<TensorSource> source = open_source(m);
  if (!source->has(what))
    fail("checkpoint {}: it has no '{}' (it has the master weights '{}' and the optimizer states [{}])", r.tag_dir,
         what, kMasterWeights, fmt::join(m.optimizer_states, ", "));

  ConsolidateProgress p;
  p.tensors_total = m.layout.params.size();
  for (const ParamDesc& d : m.layout.params) p.bytes_total += d.numel * 4;
  std::vector<TensorToWrite> tensors;
  for (const ParamDesc& d : m.layout.params) {
    int64_t index = source->find(d.name);
    if (index < 0)
      fail("checkpoint {}: parameter '{}' is in the manifest but not in {}", r.tag_dir, d.name, source->description());
    if (source->params()[static_cast<size_t>(index)].shape != d.shape)
      fail("checkpoint {}: parameter '{}' has another shape in {} than in the manifest", r.tag_dir, d.name,
           source->description());
    TensorToWrite t{d.name, DType::f32, d.shape, nullptr, {}};
    t.fill = [&, index, numel = d.numel](int64_t first, int64_t count, void* dst) {
      source->read(static_cast<size_t>(index), what, first, count, static_cast<float*>(dst));
      p.bytes_done += count * 4;
      if (first + count == numel) {
        ++p.tensors_done;
        if (progress) progress(p);
      }
    };
    tensors.push_back(std::move(t));
    r.numel += d.numel;
    if (d.numel == 0) ++p.tensors_done;  // written without a fill call
  }
  r.tensors = tensors.size();
  // "format": "pt" is what Hugging Face loaders expect of a weights file; the rest says where
  // the weights came from.
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"dscpp_checkpoint", r.tag_dir},
                                          {"global_steps", std::to_string(m.global_steps)},
                                          {"zero_stage", std::to_string(m.zero_stage)},
                                          {"world_size", std::to_string(m.world_size)},
                                          {"tensor", what}};
  const std::string partial = out + ".partial";
  try {
    write_safetensors(partial, tensors, meta);
  } catch (...) {
    std::remove(partial.c_str());
    throw;
  }
  if (std::rename(partial.c_str(), out.c_str()) != 0)
    fail("zero-to-fp32: cannot rename {} to {}: {}", partial, out, std::strerror(errno));
  return r;
}

}  // namespace dscpp::ckpt
