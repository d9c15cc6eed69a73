// A state dict as torch.save writes it (Hugging Face's pytorch_model.bin, a .pt or .pth file),
// in either of its formats:
//   zip (torch >= 1.6)  an uncompressed zip archive: "<name>/data.pkl", the pickle, and one entry
//                       "<name>/data/<key>" per storage (zip_reader.h);
//   legacy (older)      five pickles in a row (magic number, protocol version, sys_info, the
//                       object, the sorted storage keys), then each storage as an 8-byte element
//                       count and its bytes.
// The pickle is read by the restricted unpickler of torch_pickle.h, which runs no code. A tensor
// is a view into a storage: an element offset, sizes and strides. Several tensors may share one
// storage (tied weights saved once), and a view may be non-contiguous (a transposed matrix):
// read() gathers its elements by stride. Every tensor's reach is checked against its storage's
// bytes at open; every error names the file.
#pragma once

#include "checkpoint/torch_pickle.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dscpp::ckpt {

// Whether the file begins as a torch.save file does (a zip archive, a pickle, or the tar of
// torch's first format) rather than as anything else, such as safetensors.
bool is_torch_file(const std::string& path);

class TorchFile {
 public:
  struct Tensor {
    std::string name;
    TorchType type;
    std::vector<int64_t> shape, stride;
    int64_t numel = 0;
    int64_t offset = 0;  // elements into the storage
    uint64_t data = 0;   // file offset of the storage's first byte
    bool contiguous = true;
  };

  explicit TorchFile(const std::string& path);
  ~TorchFile();
  TorchFile(const TorchFile&) = delete;
  TorchFile& operator=(const TorchFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }  // in the pickle's order
  const Tensor* find(const std::string& name) const;               // nullptr if absent
  // "zip" or "legacy".
  const char* format() const { return legacy_ ? "legacy" : "zip"; }

  // Elements [first, first + count) of tensor `name`, flat in row-major order, as fp32. A tensor
  // of a type that is not float (int64, bool, ...) is refused naming it.
  void read(const std::string& name, int64_t first, int64_t count, float* dst);

 private:
  void open_zip();
  void open_legacy(uint64_t file_size);
  void add_tensors(const StateDict& dict, const std::vector<uint64_t>& data, const std::vector<uint64_t>& bytes);
  void read_contiguous(const Tensor& t, int64_t first, int64_t count, float* dst) const;

  std::string path_;
  int fd_ = -1;
  bool legacy_ = false;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  // A non-contiguous tensor's whole span in fp32, kept until another such tensor is read.
  const Tensor* span_of_ = nullptr;
  std::vector<float> span_;
};

}  // namespace dscpp::ckpt
