// Files that name tensors by the model's (Hugging Face) parameter names hold them as Hugging Face
// does, whatever dscpp keeps in memory: GPT-2's Conv1D weights as [in, out] (dscpp computes with
// [out, in]), and a shared parameter (GPT-2's and tied Llamas' lm_head.weight = the embedding)
// under every name the model uses for it, as DeepSpeed's zero_to_fp32.py restores shared
// parameters. That covers `dscpp zero-to-fp32`, stage 0's model.safetensors and
// optimizer.safetensors and the 16-bit model file; export-hf keeps one name per shared tensor, as
// transformers' save_pretrained does. Every such file says so in its header's __metadata__
// (kLayoutKey: kHfLayout), so a reader never has to guess a square matrix's orientation from its
// shape.
#pragma once

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dscpp::ckpt {

inline constexpr const char* kLayoutKey = "dscpp_layout";
inline constexpr const char* kHfLayout = "hugging_face";

// How a model's parameters appear in files with Hugging Face names.
struct HfNames {
  std::set<std::string> transposed;         // held as [cols, rows]: owners and their other names
  std::map<std::string, std::string> tied;  // a shared parameter's other name → its owner's name

  // From a manifest (keys file_transposed and tied; a checkpoint without them has neither).
  static HfNames of(const Manifest& m);
  // The names under which `owner` is also written, in name order.
  std::vector<std::string> aliases_of(const std::string& owner) const;
};

// Whether a file's metadata says it holds Hugging Face's layout.
bool holds_hf_layout(const SafetensorsFile& f);
// Whether an older dscpp wrote it (its layout then is dscpp's own [out, in], unsaid).
bool written_by_old_dscpp(const SafetensorsFile& f);

// Elements of a [rows, cols] matrix that a file holds as [cols, rows], a range at a time: the
// file's whole tensor is read once and kept until another tensor is asked for (transposed
// matrices are a layer's weights, read in order, never the embedding).
class TransposedReader {
 public:
  void read(const SafetensorsFile& f, const std::string& key, int64_t rows, int64_t cols, int64_t first, int64_t count,
            float* dst);
  // The same for a file of any format: `whole` reads the file's [cols, rows] tensor as fp32;
  // `file` and `key` say which tensor the cache holds.
  void read(const void* file, const std::string& key, int64_t rows, int64_t cols, int64_t first, int64_t count,
            float* dst, const std::function<void(float* whole)>& whole);

 private:
  const void* file_ = nullptr;
  std::string key_;  // with file_: the tensor cache_ holds
  std::vector<float> cache_;
};

// `t`, given in memory's [rows, cols] (by `data` or `fill`), as the file holds it: [cols, rows].
// The first chunk reads the whole matrix once; it is released after the last.
TensorToWrite transposed_for_file(TensorToWrite t);

}  // namespace dscpp::ckpt
