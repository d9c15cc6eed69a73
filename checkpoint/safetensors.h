// The safetensors file format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}}, then the raw little-endian tensor bytes. Checkpoints and `--init_from` use it
// so users (and PyPI's `safetensors`) can open our files.
#pragma once

#include "checkpoint/checksums.h"
#include "core/dtype.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dscpp::ckpt {

// Produces elements [first, first + count) of a tensor into `dst` (host memory, count ×
// dtype_size bytes). The writer calls it in order, in chunks of at most 4 Mi elements.
using TensorFill = std::function<void(int64_t first, int64_t count, void* dst)>;

struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // host memory, numel(shape) × dtype_size bytes; or
  TensorFill fill;             // streams the tensor (device memory, other files) when data is null
};

// Writes `path` (truncating it) and fsyncs it. Tensors are stored in the order given (names
// must be unique). A tensor given by `fill` goes through one bounded staging buffer, so the
// memory a write needs does not grow with the tensors. Throws dscpp::Error naming the path on
// any I/O failure (disk full, ...); an exception from a fill propagates (the file is left
// incomplete: write to a temporary name and rename when that matters). Returns the SHA-256
// digests of what it wrote (checksums.h), computed on the way, so no one reads the file back.
FileDigests write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t offset = 0;  // bytes from the start of the file
  uint64_t bytes = 0;
};

// An opened safetensors file. The header is validated at open (sizes, offsets inside the file,
// dtype names, no overlaps); every error names the file and what was wrong. As in the
// reference implementation, the tensors must tile the data section exactly (no gaps, no
// trailing bytes). Reads use pread, so a rank can read just the slice it owns.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find(const std::string& name) const;                // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads elements [first, first+count) of tensor `name` (flat, row-major) into `dst`,
  // converting from the stored dtype to `dst_type` (see dscpp::convert: float types convert
  // among themselves; integer tensors read only as their own type).
  void read(const std::string& name, int64_t first, int64_t count, void* dst, DType dst_type) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;  // name → position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace dscpp::ckpt
