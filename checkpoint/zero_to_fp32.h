// `dscpp zero-to-fp32 CKPT OUT`: a checkpoint of any stage and world size → one safetensors
// file of fp32 weights by parameter name (DeepSpeed's zero_to_fp32.py, without torch, the
// runtime or a GPU).
//
// Streams parameter by parameter: each tensor is read fragment by fragment from the rank
// files straight into the writer's staging buffer (4 Mi elements), so memory stays at about
// 16 MB whatever the model size. The output is written to OUT.partial and renamed to OUT
// when complete, so an interrupted conversion never leaves a truncated OUT.
#pragma once

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_source.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dscpp::ckpt {

struct ConsolidateProgress {
  size_t tensors_done = 0, tensors_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;
};

struct ConsolidateResult {
  std::string tag_dir;  // the checkpoint that was read
  int zero_stage = 0;
  int world_size = 1;
  int64_t global_steps = 0;
  bool verified = false;  // its files matched the SHA-256 digests recorded at save (none recorded: false)
  size_t tensors = 0;
  int64_t numel = 0;
};

// A checkpoint opened for streaming its parameters out whole, one at a time, after every file
// was checked against the digests recorded at save (zero-to-fp32, export-hf).
class CheckpointReader {
 public:
  // `ckpt`: a save directory (follows `latest`) or a tag directory; `what` as below.
  CheckpointReader(const std::string& ckpt, const std::string& what,
                   std::function<void(const ConsolidateProgress&)> progress = {});
  const Manifest& manifest() const { return manifest_; }
  const ConsolidateResult& result() const { return result_; }
  // Parameter i of the manifest as a tensor to write, named `name`, stored as `dtype` (a float
  // type), transposed ([cols, rows]) when asked; each element is read from the checkpoint
  // when the writer asks for it (a transposed one reads its parameter whole first).
  TensorToWrite tensor(size_t i, const std::string& name, DType dtype, bool transposed);

 private:
  std::string what_;
  Manifest manifest_;
  ConsolidateResult result_;
  std::unique_ptr<TensorSource> source_;
  std::function<void(const ConsolidateProgress&)> progress_;
  ConsolidateProgress done_;
  std::vector<float> staged_;  // a transposed parameter, or one chunk to convert
};

// Writes `tensors` to `out` through OUT.partial, renamed when complete.
FileDigests write_whole(const std::string& out, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata);

// `ckpt` is a save directory (follows `latest`) or a tag directory. `progress` (optional) is
// called as each tensor finishes. `what` selects what is consolidated: the fp32 master
// weights ("fp32", the default) or an optimizer state ("exp_avg", ...), each parameter's
// state stored under the parameter's name; throws dscpp::Error listing the states the
// checkpoint has when it has no `what`.
ConsolidateResult zero_to_fp32(const std::string& ckpt, const std::string& out,
                               const std::function<void(const ConsolidateProgress&)>& progress = {},
                               const std::string& what = "fp32");

}  // namespace dscpp::ckpt
