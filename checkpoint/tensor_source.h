// "Give me elements [a, b) of parameter p's fp32 master weights, or of its optimizer state s":
// one reader over every place dscpp takes weights from.
//
//   NamedTensorSource       a safetensors file by parameter name (--init_from, any float
//                           dtype, converted to fp32), plus optionally an optimizer file of
//                           "<param>/<state>" tensors (a stage-0 checkpoint)
//   PartitionedTensorSource a ZeRO checkpoint's per-rank partition files: each request is cut
//                           into fragments by the saved layout (partition_layout.h) and
//                           read with pread from the ranks' files, opened on first use
//
// Every read goes straight from the file into the caller's buffer (no whole-tensor copies),
// so memory stays bounded by what the caller asks for: the engine's load and --init_from
// (each rank reading only the fragments it owns) and zero-to-fp32 (tensor by tensor).
#pragma once

#include "checkpoint/hf_layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/partition_layout.h"
#include "checkpoint/safetensors.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dscpp::ckpt {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The file or checkpoint, for messages.
  virtual const std::string& description() const = 0;
  // The parameters it holds, in its order (numel and shape; offset only for checkpoints).
  virtual const std::vector<ParamDesc>& params() const = 0;
  // Whether it holds `what`: kMasterWeights, or an optimizer state name.
  virtual bool has(const std::string& what) const = 0;
  // Elements [first, first + count) of params()[param]'s `what`, as fp32, into `dst`.
  // Throws dscpp::Error naming the file and tensor when it is missing or unreadable.
  virtual void read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) = 0;

  // Index of the parameter named `name`, or -1.
  int64_t find(const std::string& name) const;

 private:
  mutable std::map<std::string, size_t> index_;
};

class NamedTensorSource final : public TensorSource {
 public:
  // `weights`: tensors by parameter name; `optimizer` (optional, "" = none): "<param>/<state>".
  // When the weights file says it holds Hugging Face's layout (hf_layout.h), the tensors named
  // in `transposed` are [cols, rows] in both files: params() reports memory's [rows, cols] and
  // read() serves that layout (reading the file's whole tensor once). Files of an older dscpp
  // hold memory's layout and are read as they are.
  explicit NamedTensorSource(const std::string& weights, const std::string& optimizer = "",
                             const std::set<std::string>& transposed = {});
  const std::string& description() const override { return weights_.path(); }
  const std::vector<ParamDesc>& params() const override { return params_; }
  bool has(const std::string& what) const override;
  void read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) override;

 private:
  void read_file(const SafetensorsFile& f, const std::string& key, size_t param, int64_t first, int64_t count,
                 float* dst);

  SafetensorsFile weights_;
  std::unique_ptr<SafetensorsFile> optimizer_;
  std::vector<ParamDesc> params_;
  std::set<std::string> transposed_;
  TransposedReader transposed_reader_;
};

class PartitionedTensorSource final : public TensorSource {
 public:
  explicit PartitionedTensorSource(const Manifest& manifest);
  const std::string& description() const override { return manifest_.tag_dir; }
  const std::vector<ParamDesc>& params() const override { return manifest_.layout.params; }
  bool has(const std::string& what) const override;
  void read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) override;

 private:
  const SafetensorsFile& rank_file(int rank);

  Manifest manifest_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

// The source of a checkpoint's tensors (by_name or partitions, as its manifest says).
std::unique_ptr<TensorSource> open_source(const Manifest& manifest);

}  // namespace dscpp::ckpt
