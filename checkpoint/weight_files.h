// Weights as other tools save them, by tensor name: one file, a sharded set (Hugging Face's
// index, whose weight_map names each tensor's shard), or a directory holding either. A file is
// safetensors or torch.save's (pytorch_model.bin, .pt: torch_file.h), told apart by its first
// bytes, so an index may name shards of either. In a directory the first of
// model.safetensors.index.json, model.safetensors, pytorch_model.bin and
// pytorch_model.bin.index.json is read: safetensors first, as transformers' from_pretrained
// prefers it. A TensorSource (tensor_source.h) by tensor name, so the engine's --init_from and
// a plugin's init_from read them as they read any file: each rank only what it owns.
//
// Tensors named in `transposed` are 2-D matrices the files hold as [cols, rows] (GPT-2's Conv1D
// weights): params() reports them in memory's shape [rows, cols] and read() serves elements of
// that layout, reading the file's whole tensor once (kept until another transposed tensor is
// read; transposed matrices are a layer's weights, not the embedding). A file holds them so
// (hf_layout.h): one an older dscpp wrote holds them as [rows, cols] without saying so, and is
// refused when it has any, since a square one cannot be told apart by its shape.
//
// `tied` maps a shared parameter's other names to its owner's: a file may hold it under any
// of them or several (then the values must be equal; torch.save keeps tied weights as two names
// of one storage); params() lists it under the owner's name when the file has only another.
#pragma once

#include "checkpoint/tensor_source.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dscpp::ckpt {

class WeightFiles final : public TensorSource {
 public:
  // Throws dscpp::Error naming the path when it is none of the three, an index that does not
  // parse or names a missing shard, a file that does not read (naming it and what is wrong), or
  // a tensor that two shards hold.
  WeightFiles(const std::string& path, std::set<std::string> transposed = {},
              const std::map<std::string, std::string>& tied = {});
  ~WeightFiles() override;

  const std::string& description() const override { return path_; }
  const std::vector<ParamDesc>& params() const override { return params_; }
  bool has(const std::string& what) const override { return what == kMasterWeights; }
  void read(size_t param, const std::string& what, int64_t first, int64_t count, float* dst) override;

  // The files read (one, or the shards in index order).
  const std::vector<std::string>& files() const { return file_paths_; }

  class Shard;  // one file, of either format

 private:
  std::string path_;
  std::vector<std::string> file_paths_;
  std::vector<std::unique_ptr<Shard>> files_;
  std::vector<ParamDesc> params_;
  std::vector<size_t> file_of_;  // per param: index into files_
  std::vector<std::string> key_;  // per param: its tensor's name in the file
  std::set<std::string> transposed_;
  TransposedReader transposed_reader_;
};

}  // namespace dscpp::ckpt
