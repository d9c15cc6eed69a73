// safetensors writer and validating reader. The checks follow the reference implementation
// (huggingface/safetensors, `Metadata::validate`): the tensors must tile the data section
// exactly — sorted by offset, each begins where the previous ends, the last ends at the end
// of the file — and each span must equal numel × dtype size. Files that PyPI's `safetensors`
// would reject are rejected here too, with the file and the tensor named.
#include "checkpoint/safetensors.h"

#include "core/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

namespace dscpp::ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian data");

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length
// would otherwise make us allocate whatever the first 8 bytes say).
constexpr uint64_t kMaxHeader = 100'000'000;

constexpr int64_t kFillChunk = int64_t{4} << 20;  // elements per TensorToWrite::fill call

const char* st_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  invalid_dtype(static_cast<int>(t));
}

std::optional<DType> st_parse(const std::string& s) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i8, DType::u8, DType::i32, DType::i64})
    if (s == st_name(t)) return t;
  return std::nullopt;
}


// numel of a shape, or nullopt on a negative dimension or overflow.
std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

void write_all(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fail("safetensors: writing {} failed: {}", path, std::strerror(err));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

FileDigests write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // Header first: names, dtypes, shapes and offsets are all known before any data moves.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") fail("safetensors: writing {}: '__metadata__' is reserved as a tensor name", path);
    if (!seen.insert(t.name).second) fail("safetensors: writing {}: tensor '{}' given twice", path, t.name);
    auto numel = checked_numel(t.shape);
    if (!numel) fail("safetensors: writing {}: tensor '{}' has an invalid shape", path, t.name);
    uint64_t bytes = static_cast<uint64_t>(*numel) * dtype_size(t.dtype);
    if (bytes > 0 && t.data == nullptr && !t.fill)
      fail("safetensors: writing {}: tensor '{}' has no data", path, t.name);
    header[t.name] = {{"dtype", st_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string text = header.dump();
  // Pad with spaces to a multiple of 8 so the data section starts 8-byte aligned, as the
  // reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("safetensors: cannot create {}: {}", path, std::strerror(errno));
  FileDigests digests;
  {
    Sha256 h;
    h.update(len, sizeof len);
    h.update(text.data(), text.size());
    digests[kHeaderDigest] = h.hex();
  }
  write_all(fd, path, len, sizeof len);
  write_all(fd, path, text.data(), text.size());
  std::vector<unsigned char> staging;  // for tensors given by fill
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    Sha256 h;
    if (sizes[i] > 0 && t.data) {
      h.update(t.data, sizes[i]);
      write_all(fd, path, t.data, sizes[i]);
    }
    if (sizes[i] == 0 || t.data) {
      digests[t.name] = h.hex();
      continue;
    }
    const size_t esize = dtype_size(t.dtype);
    const int64_t numel = static_cast<int64_t>(sizes[i] / esize);
    const int64_t chunk = std::min<int64_t>(kFillChunk, numel);
    if (staging.size() < static_cast<size_t>(chunk) * esize) staging.resize(static_cast<size_t>(chunk) * esize);
    for (int64_t done = 0; done < numel; done += chunk) {
      const int64_t n = std::min(chunk, numel - done);
      try {
        t.fill(done, n, staging.data());
      } catch (...) {
        ::close(fd);
        throw;
      }
      h.update(staging.data(), static_cast<size_t>(n) * esize);
      write_all(fd, path, staging.data(), static_cast<size_t>(n) * esize);
    }
    digests[t.name] = h.hex();
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail("safetensors: fsync of {} failed: {}", path, std::strerror(err));
  }
  // close() can report a deferred write error (NFS): a checkpoint must not pass silently.
  if (::close(fd) != 0) fail("safetensors: closing {} failed: {}", path, std::strerror(errno));
  return digests;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("safetensors: cannot open {}: {}", path, std::strerror(errno));
  // The destructor does not run for a throwing constructor: close on every error path.
  auto bad = [&](const std::string& what) {
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("safetensors: {}: {}", path, what));
  };
  auto read_at = [&](void* dst, size_t n, uint64_t off) {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) bad(fmt::format("read failed: {}", std::strerror(errno)));
      if (r == 0) bad("truncated file (unexpected end of file)");
      p += r;
      n -= static_cast<size_t>(r);
      off += static_cast<uint64_t>(r);
    }
  };

  struct stat st {};
  if (::fstat(fd_, &st) != 0) bad(fmt::format("stat failed: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) bad("not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    bad(fmt::format("truncated file: {} bytes, shorter than the 8-byte header length", file_size));
  unsigned char len[8];
  read_at(len, 8, 0);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > file_size - 8)
    bad(fmt::format("header length {} goes beyond the file ({} bytes): truncated file or not safetensors", n,
                    file_size));
  if (n > kMaxHeader) bad(fmt::format("header length {} exceeds the 100 MB limit", n));
  std::string text(n, '\0');
  read_at(text.data(), n, 8);
  if (text.empty() || text[0] != '{') bad("header does not start with '{' (not a safetensors file?)");

  nlohmann::ordered_json header;  // ordered: ties between empty tensors keep header order
  try {
    header = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    bad(fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) bad("header is not a JSON object");

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = file_size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::ordered_json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(fmt::format("__metadata__ value of '{}' is not a string", m.key()));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto what = [&](const std::string& problem) { return fmt::format("tensor '{}': {}", name, problem); };
    if (!v.is_object()) bad(what("entry is not an object"));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) bad(what(fmt::format("missing '{}'", key)));
    for (auto k = v.begin(); k != v.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        bad(what(fmt::format("unknown field '{}'", k.key())));
    TensorInfo info;
    info.name = name;
    if (!v["dtype"].is_string()) bad(what("dtype is not a string"));
    auto dt = st_parse(v["dtype"].get<std::string>());
    if (!dt)
      bad(what(fmt::format("unknown or unsupported dtype '{}' (dscpp reads F32 F16 BF16 F64 I32 I64 I8 U8)",
                           v["dtype"].get<std::string>())));
    info.dtype = *dt;
    if (!v["shape"].is_array()) bad(what("shape is not an array"));
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad(what(fmt::format("shape entry {} is not a non-negative integer", d.dump())));
      uint64_t u = d.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad(what("shape entry too large"));
      info.shape.push_back(static_cast<int64_t>(u));
    }
    auto numel = checked_numel(info.shape);
    if (!numel || static_cast<uint64_t>(*numel) > std::numeric_limits<uint64_t>::max() / dtype_size(info.dtype))
      bad(what("shape overflows"));
    info.numel = *numel;
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad(what("data_offsets is not a pair of non-negative integers"));
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end < begin) bad(what(fmt::format("data_offsets [{}, {}] end before they begin", begin, end)));
    if (end > data_size)
      bad(what(fmt::format("data_offsets [{}, {}] lie outside the data section ({} bytes): truncated file?", begin,
                           end, data_size)));
    uint64_t expect = static_cast<uint64_t>(info.numel) * dtype_size(info.dtype);
    if (end - begin != expect)
      bad(what(fmt::format("shape {} × {} = {} bytes, but data_offsets [{}, {}] span {} bytes",
                           v["shape"].dump(), st_name(info.dtype), expect, begin, end, end - begin)));
    info.offset = data_start + begin;
    info.bytes = end - begin;
    tensors_.push_back(std::move(info));
  }
  // File order, then the tiling check: no overlaps, no holes, nothing after the last tensor.
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
  });
  uint64_t pos = data_start;
  const TensorInfo* prev = nullptr;
  for (const auto& t : tensors_) {
    if (t.offset < pos)
      bad(fmt::format("tensors '{}' and '{}' overlap (bytes {}..{} and {}..{} of the data section)", prev->name,
                      t.name, prev->offset - data_start, pos - data_start, t.offset - data_start,
                      t.offset - data_start + t.bytes));
    if (t.offset > pos)
      bad(fmt::format("{} unused bytes before tensor '{}' (data section offset {})", t.offset - pos, t.name,
                      pos - data_start));
    pos = t.offset + t.bytes;
    prev = &t;
  }
  if (pos != file_size)
    bad(fmt::format("{} bytes after the last tensor's data (file {} bytes, tensors end at {})", file_size - pos,
                    file_size, pos));
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read(const std::string& name, int64_t first, int64_t count, void* dst, DType dst_type) const {
  const TensorInfo* t = find(name);
  if (!t) fail("safetensors: {}: no tensor named '{}'", path_, name);
  if (first < 0 || count < 0 || first > t->numel || count > t->numel - first)
    fail("safetensors: {}: elements [{}, {}) are outside tensor '{}' ({} elements)", path_, first, first + count, name,
         t->numel);
  if (count == 0) return;
  const size_t esize = dtype_size(t->dtype);
  auto read_at = [&](void* out, size_t n, uint64_t off) {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail("safetensors: {}: reading tensor '{}' failed: {}", path_, name, std::strerror(errno));
      if (r == 0) fail("safetensors: {}: truncated file while reading tensor '{}' (changed since open?)", path_, name);
      p += r;
      n -= static_cast<size_t>(r);
      off += static_cast<uint64_t>(r);
    }
  };
  const uint64_t start = t->offset + static_cast<uint64_t>(first) * esize;
  if (dst_type == t->dtype) {
    read_at(dst, static_cast<size_t>(count) * esize, start);
    return;
  }
  // Convert through a bounded staging buffer so a large slice does not double its memory.
  constexpr size_t kChunk = size_t{4} << 20;  // elements
  std::vector<unsigned char> buf(std::min<size_t>(kChunk, static_cast<size_t>(count)) * esize);
  char* out = static_cast<char*>(dst);
  for (int64_t done = 0; done < count;) {
    size_t n = std::min<size_t>(kChunk, static_cast<size_t>(count - done));
    read_at(buf.data(), n * esize, start + static_cast<uint64_t>(done) * esize);
    try {
      convert(buf.data(), t->dtype, out + static_cast<size_t>(done) * dtype_size(dst_type), dst_type, n);
    } catch (const Error& e) {
      fail("safetensors: {}: tensor '{}': {}", path_, name, e.what());
    }
    done += static_cast<int64_t>(n);
  }
}

}  // namespace dscpp::ckpt
