// torch.save's two formats as torch/serialization.py writes and reads them (_save and
// _legacy_save; _load and _legacy_load): where the pickle is, where each storage's bytes are.
#include "checkpoint/torch_file.h"

#include "checkpoint/zip_reader.h"
#include "core/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace dscpp::ckpt {
namespace {

constexpr uint64_t kMaxPickle = uint64_t{1} << 30;  // a state dict of 100k tensors pickles to a few MB
constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
constexpr size_t kHead = 512;

enum class Format { zip, legacy, tar, other };

// A safetensors file has '{' at byte 8, where its JSON header begins; none of these does.
Format format_of(const unsigned char* h, size_t n) {
  if (n < 9 || h[8] == '{') return Format::other;
  if (std::memcmp(h, "PK\x03\x04", 4) == 0) return Format::zip;
  if (n >= 262 && std::memcmp(h + 257, "ustar", 5) == 0) return Format::tar;
  // PROTO, perhaps a FRAME, then LONG1 of the 10-byte magic number.
  size_t at = 2;
  if (h[0] != 0x80 || h[1] > 5) return Format::other;
  if (h[at] == 0x95) at += 9;
  return at + 1 < n && h[at] == 0x8a && h[at + 1] == 10 ? Format::legacy : Format::other;
}

size_t read_head(int fd, unsigned char* h) {
  size_t n = 0;
  while (n < kHead) {
    const ssize_t r = ::pread(fd, h + n, kHead - n, static_cast<off_t>(n));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  return n;
}

}  // namespace

bool is_torch_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char h[kHead];
  const size_t n = read_head(fd, h);
  ::close(fd);
  return format_of(h, n) != Format::other;
}

TorchFile::TorchFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("{}: stat failed: {}", path_, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path_);
    unsigned char h[kHead];
    switch (format_of(h, read_head(fd_, h))) {
      case Format::zip:
        open_zip();
        break;
      case Format::legacy:
        open_legacy(static_cast<uint64_t>(st.st_size));
        break;
      case Format::tar:
        fail(
            "{}: torch.save's first format (a tar archive, torch before 0.4) is not read; load it with torch and "
            "save it again",
            path_);
      case Format::other:
        fail("{}: not a torch.save file (neither a zip archive nor torch's pickles)", path_);
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TorchFile::~TorchFile() {
  ::close(fd_);
}

const TorchFile::Tensor* TorchFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void TorchFile::open_zip() {
  const ZipReader zip(fd_, path_);
  std::string prefix;
  for (const auto& [name, entry] : zip.entries()) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    if (!prefix.empty()) fail("{}: the archive holds two pickles, {}/data.pkl and {}", path_, prefix, name);
    prefix = name.substr(0, slash);
  }
  if (prefix.empty()) fail("{}: a zip archive without <name>/data.pkl: not a torch.save file", path_);
  if (zip.entries().count(prefix + "/byteorder") && zip.read_all(prefix + "/byteorder", 16) != "little")
    fail("{}: saved on a big-endian machine; dscpp reads little-endian files only", path_);
  const std::string pickle = zip.read_all(prefix + "/data.pkl", kMaxPickle);
  BytesInput in(pickle, path_ + " (" + prefix + "/data.pkl)");
  const StateDict dict = unpickle_state_dict(in, path_ + " (" + prefix + "/data.pkl)");
  std::vector<uint64_t> data, bytes;
  for (const StorageRef& s : dict.storages) {
    const ZipEntry* e = zip.find(prefix + "/data/" + s.key);
    if (!e)
      fail("{}: the pickle refers to storage '{}', but the archive has no entry {}/data/{}", path_, s.key, prefix,
           s.key);
    data.push_back(e->offset);
    bytes.push_back(e->size);
  }
  add_tensors(dict, data, bytes);
}

void TorchFile::open_legacy(uint64_t file_size) {
  legacy_ = true;
  FileInput in(fd_, path_, 0, file_size);
  unpickle_legacy_header(in, path_);
  const StateDict dict = unpickle_state_dict(in, path_);
  const std::vector<std::string> keys = unpickle_string_list(in, path_);
  std::vector<uint64_t> data(dict.storages.size(), kNone), bytes(dict.storages.size(), 0);
  uint64_t pos = in.position();
  for (const std::string& key : keys) {
    auto s =
        std::find_if(dict.storages.begin(), dict.storages.end(), [&](const StorageRef& r) { return r.key == key; });
    if (s == dict.storages.end()) fail("{}: the file lists storage '{}', which no tensor refers to", path_, key);
    const size_t i = static_cast<size_t>(s - dict.storages.begin());
    if (data[i] != kNone) fail("{}: the file lists storage '{}' twice", path_, key);
    if (file_size - pos < 8) fail("{}: the file ends before storage '{}' (truncated file?)", path_, key);
    unsigned char n8[8];
    pread_exact(fd_, path_, "a storage's size", n8, 8, pos);
    uint64_t numel = 0;
    for (int b = 0; b < 8; ++b) numel |= static_cast<uint64_t>(n8[b]) << (8 * b);
    const uint64_t es = s->type.element_size;
    if (numel > (file_size - pos - 8) / es)
      fail("{}: storage '{}' claims {} elements of {}, more than the file holds after it (truncated file?)", path_, key,
           numel, s->type.name);
    data[i] = pos + 8;
    bytes[i] = numel * es;
    pos += 8 + bytes[i];
  }
  for (size_t i = 0; i < dict.storages.size(); ++i)
    if (data[i] == kNone)
      fail("{}: the pickle refers to storage '{}', which the file does not hold", path_, dict.storages[i].key);
  for (const PickledTensor& t : dict.tensors)
    if (t.type.name != dict.storages[t.storage].type.name)
      fail("{}: tensor '{}' reads storage '{}' as {}, but it is stored as {}", path_, t.name,
           dict.storages[t.storage].key, t.type.name, dict.storages[t.storage].type.name);
  add_tensors(dict, data, bytes);
}

void TorchFile::add_tensors(const StateDict& dict, const std::vector<uint64_t>& data,
                            const std::vector<uint64_t>& bytes) {
  for (const PickledTensor& p : dict.tensors) {
    Tensor t{p.name, p.type, p.shape, p.stride, 1, p.offset, data[p.storage], true};
    // The unpickler checked sizes and strides for overflow, with room for the element size.
    int64_t last = p.offset, expect = 1;
    for (size_t d = p.shape.size(); d-- > 0;) {
      t.numel *= p.shape[d];
      if (p.shape[d] > 0) last += (p.shape[d] - 1) * p.stride[d];
      if (p.shape[d] != 1 && p.stride[d] != expect) t.contiguous = false;
      expect *= p.shape[d];
    }
    const uint64_t es = p.type.element_size, held = bytes[p.storage] / es;
    if (t.numel > 0 && static_cast<uint64_t>(last) >= held)
      fail(
          "{}: tensor '{}' (offset {}, size [{}], stride [{}]) reaches element {} of storage '{}', which holds {} "
          "elements of {}: the file is damaged",
          path_, p.name, p.offset, fmt::join(p.shape, ", "), fmt::join(p.stride, ", "), last,
          dict.storages[p.storage].key, held, p.type.name);
    if (t.numel == 0) t.contiguous = true;
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
}

// `count` elements of the storage from element `at`, as fp32, converted a bounded chunk at a time.
void TorchFile::read_contiguous(const Tensor& t, int64_t at, int64_t count, float* dst) const {
  const size_t es = t.type.element_size;
  constexpr int64_t kChunk = int64_t{4} << 20;
  std::vector<unsigned char> buf(static_cast<size_t>(std::min(kChunk, count)) * es);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kChunk, count - done);
    pread_exact(fd_, path_, "tensor '" + t.name + "'", buf.data(), static_cast<size_t>(n) * es,
                t.data + static_cast<uint64_t>(at + done) * es);
    convert(buf.data(), *t.type.dtype, dst + done, DType::f32, static_cast<size_t>(n));
    done += n;
  }
}

void TorchFile::read(const std::string& name, int64_t first, int64_t count, float* dst) {
  const Tensor* t = find(name);
  if (!t) fail("{}: no tensor named '{}'", path_, name);
  if (first < 0 || count < 0 || first > t->numel || count > t->numel - first)
    fail("{}: elements [{}, {}) are outside tensor '{}' ({} elements)", path_, first, first + count, name, t->numel);
  if (!t->type.dtype)
    fail("{}: tensor '{}' is {}; dscpp reads float tensors (float32, float16, bfloat16, float64) as weights", path_,
         name, t->type.name);
  if (count == 0) return;
  if (t->contiguous) return read_contiguous(*t, t->offset + first, count, dst);
  // A strided view: gather by stride from its span of the storage, read once while it is small
  // enough to hold, or element by element where the strides spread a few elements far apart.
  const size_t dims = t->shape.size();
  int64_t span = 1;
  for (size_t d = 0; d < dims; ++d) span += (t->shape[d] - 1) * t->stride[d];
  const bool hold = span <= 2 * t->numel + (int64_t{16} << 20);
  if (hold && span_of_ != t) {
    span_of_ = nullptr;
    span_.assign(static_cast<size_t>(span), 0.0f);
    read_contiguous(*t, t->offset, span, span_.data());
    span_of_ = t;
  }
  std::vector<int64_t> idx(dims);
  int64_t at = 0;
  for (size_t d = dims, rest = static_cast<size_t>(first); d-- > 0;) {
    idx[d] = static_cast<int64_t>(rest % static_cast<size_t>(t->shape[d]));
    rest /= static_cast<size_t>(t->shape[d]);
    at += idx[d] * t->stride[d];
  }
  for (int64_t e = 0; e < count; ++e) {
    if (hold)
      dst[e] = span_[static_cast<size_t>(at)];
    else
      read_contiguous(*t, t->offset + at, 1, dst + e);
    for (size_t d = dims; d-- > 0;) {  // the next index, last dimension fastest
      at += t->stride[d];
      if (++idx[d] < t->shape[d]) break;
      at -= idx[d] * t->stride[d];
      idx[d] = 0;
    }
  }
}

}  // namespace dscpp::ckpt
