// The pickles in torch.save's files, read by a restricted unpickler that never runs code.
//
// Python's pickle is a little stack machine whose GLOBAL and REDUCE opcodes import and call any
// function: unpickling an untrusted file is running it. This one knows the opcodes a state dict
// uses (protocols 2 to 5: containers, numbers, strings, the memo, persistent ids, GLOBAL,
// REDUCE and BUILD) and a fixed list of globals: collections.OrderedDict, torch._utils'
// tensor and parameter rebuilders, torch's typed storage classes (torch.FloatStorage, ...) and
// dtypes (torch.float16, ...). Any other global (os.system, builtins.eval, ...) is refused when
// the pickle names it, before anything could call it; a REDUCE calls only the rebuilders
// implemented here, on arguments checked for their types; an opcode that builds an object of a
// class (NEWOBJ, INST, OBJ) is refused. Every error names the pickle. Values live in one arena
// owned by the call, so cycles a malicious memo builds and deep nesting cost nothing to free.
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::ckpt {

// Where a pickle's bytes come from; read() throws dscpp::Error at the end of the input.
class PickleInput {
 public:
  virtual ~PickleInput() = default;
  virtual void read(void* dst, size_t n) = 0;
  virtual uint64_t position() const = 0;  // bytes read so far
  virtual uint64_t remaining() const = 0;
};

// A pickle held in memory (a zip entry).
class BytesInput final : public PickleInput {
 public:
  BytesInput(std::string_view bytes, std::string where) : bytes_(bytes), where_(std::move(where)) {}
  void read(void* dst, size_t n) override;
  uint64_t position() const override { return pos_; }
  uint64_t remaining() const override { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  std::string where_;
  size_t pos_ = 0;
};

// Pickles one after another in a file from `start` (the legacy format), read through a buffer.
class FileInput final : public PickleInput {
 public:
  FileInput(int fd, std::string path, uint64_t start, uint64_t file_size);
  void read(void* dst, size_t n) override;
  uint64_t position() const override { return pos_; }
  uint64_t remaining() const override { return size_ - pos_; }

 private:
  int fd_;
  std::string path_;
  uint64_t pos_, size_;
  std::vector<char> buf_;
  uint64_t buf_at_ = 0;  // file offset of buf_[0]
};

// A torch storage type as the pickle names it.
struct TorchType {
  std::string name;            // "torch.float16"
  size_t element_size = 0;     // bytes
  std::optional<DType> dtype;  // set for the float types dscpp reads as weights
};

// A storage the pickle refers to by key: "data/<key>" in the zip format, in the order of the
// storage key list in the legacy format.
struct StorageRef {
  std::string key;
  TorchType type;     // the type of its first reference; the legacy format's one type
  int64_t numel = 0;  // elements of `type`, as the persistent id says
};

struct PickledTensor {
  std::string name;
  size_t storage = 0;  // index into StateDict::storages
  TorchType type;
  int64_t offset = 0;  // elements of `type` into the storage
  std::vector<int64_t> shape, stride;
};

struct StateDict {
  std::vector<StorageRef> storages;
  std::vector<PickledTensor> tensors;  // in the pickle's order; a name given twice keeps its last
};

// torch.save's main pickle of a state dict (a dict or OrderedDict of name → tensor; values
// that are not tensors are left out). `where` names the pickle in errors.
StateDict unpickle_state_dict(PickleInput& in, const std::string& where);

// The legacy format's first three pickles: its magic number, protocol version 1001 and the
// sys_info dict, which must say little-endian.
void unpickle_legacy_header(PickleInput& in, const std::string& where);
// The legacy format's list of storage keys, after the main pickle.
std::vector<std::string> unpickle_string_list(PickleInput& in, const std::string& where);

}  // namespace dscpp::ckpt
