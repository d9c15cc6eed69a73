// `dscpp zero-to-fp32 CKPT OUT`: a checkpoint of any stage and world size → one safetensors
// file of fp32 weights by parameter name (DeepSpeed's zero_to_fp32.py, without torch, the
// runtime or a GPU). Frozen parameters (the manifest's "frozen": no master weights, no optimizer
// state) come from <tag>/frozen.safetensors, widened to fp32, as zero_to_fp32.py includes them;
// an optimizer state has none of them.
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
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  size_t frozen = 0;  // of `tensors`: frozen parameters (frozen.safetensors)
};

// A checkpoint opened for streaming its parameters out whole, one at a time, after every file
// was checked against the digests recorded at save (zero-to-fp32, export-hf).
class CheckpointReader {
 public:
  // `ckpt`: a save directory (follows `latest`) or a tag directory; `what` as below. Throws
  // dscpp::Error naming the file when one differs from its digests, and naming the parameter
  // when the files lack one the manifest lists. `with_frozen` false leaves the frozen parameters
  // out (their file unread: what reads only trained parameters need not hash the base model).
  CheckpointReader(const std::string& ckpt, const std::string& what,
                   std::function<void(const ConsolidateProgress&)> progress = {}, bool with_frozen = true);
  const Manifest& manifest() const { return manifest_; }
  const ConsolidateResult& result() const { return result_; }
  // Every parameter it holds `what` of, in memory's layout ([out, in] where the files hold
  // [in, out]): the manifest's layout in order, then, for the master weights, the frozen ones.
  const std::vector<ParamDesc>& params() const { return params_; }
  bool frozen(size_t i) const { return i >= manifest_.layout.params.size(); }
  int64_t find(const std::string& name) const;  // index into params(), or -1
  // Elements [first, first + count) of params()[i] as fp32, in memory's layout.
  void read(size_t i, int64_t first, int64_t count, float* dst);

  // Changes a parameter's whole fp32 value (memory's layout) before it is written.
  using Adjust = std::function<void(std::vector<float>& whole)>;
  // params()[i] as a tensor to write (once, or once per name), named `name`, stored as `dtype`
  // (a float type), transposed ([cols, rows]) when asked; each element is read from the
  // checkpoint when the writer asks for it (a transposed or adjusted one reads its parameter
  // whole first, after the writer's previous tensor is done with it).
  TensorToWrite tensor(size_t i, const std::string& name, DType dtype, bool transposed, Adjust adjust = {});
  // params()[i] will not be written: the progress totals leave it out.
  void leave_out(size_t i);

 private:
  void open_frozen();
  void add(const ParamDesc& d, TensorSource& source, size_t index);

  std::string what_;
  Manifest manifest_;
  ConsolidateResult result_;
  std::unique_ptr<TensorSource> source_, frozen_source_;
  std::vector<ParamDesc> params_;
  std::map<std::string, size_t> index_;                  // name → index into params_
  std::vector<std::pair<TensorSource*, size_t>> where_;  // per params_ entry: its source and index there
  std::function<void(const ConsolidateProgress&)> progress_;
  ConsolidateProgress done_;
  std::vector<bool> written_;  // per params_ entry: tensor() was asked for it
  std::vector<float> staged_;  // a whole parameter (transposed or adjusted)
  std::vector<float> chunk_;   // one chunk to convert
};

// Writes `tensors` to `out` through OUT.partial, renamed when complete.
FileDigests write_whole(const std::string& out, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata);

// `ckpt` is a save directory (follows `latest`) or a tag directory. `progress` (optional) is
// called as each tensor finishes. `what` selects what is consolidated: the fp32 master
// weights ("fp32", the default; frozen parameters included) or an optimizer state ("exp_avg",
// ...), each parameter's state stored under the parameter's name (frozen parameters have none
// and are left out); throws dscpp::Error listing the states the checkpoint has when it has no
// `what`.
ConsolidateResult zero_to_fp32(const std::string& ckpt, const std::string& out,
                               const std::function<void(const ConsolidateProgress&)>& progress = {},
                               const std::string& what = "fp32");

}  // namespace dscpp::ckpt
