// The zip format's records as PKWARE's APPNOTE describes them, read only as far as torch.save's
// archives need: the end of central directory record (and its ZIP64 form), the central
// directory, the local headers. Every length and offset read from the file is checked against
// the file's size before it is used, so a damaged archive fails with its path named.
#include "checkpoint/zip_reader.h"

#include "core/error.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace dscpp::ckpt {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64Extra = 0x0001;
constexpr size_t kEndSize = 22, kCentralSize = 46, kLocalSize = 30, kZip64EndSize = 56, kLocatorSize = 20;

uint16_t u16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t u32(const unsigned char* p) {
  return u16(p) | static_cast<uint32_t>(u16(p + 2)) << 16;
}
uint64_t u64(const unsigned char* p) {
  return u32(p) | static_cast<uint64_t>(u32(p + 4)) << 32;
}

}  // namespace

void pread_exact(int fd, const std::string& path, const std::string& what, void* dst, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("{}: reading {} failed: {}", path, what, std::strerror(errno));
    if (r == 0) fail("{}: truncated file while reading {} (at byte {})", path, what, offset);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

ZipReader::ZipReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("{}: stat failed: {}", path_, std::strerror(errno));
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (file_size_ < kEndSize)
    fail("{}: truncated zip archive ({} bytes, no end of central directory)", path_, file_size_);
  // The end record sits in the last 22 bytes plus a comment of up to 64 KiB.
  const uint64_t tail_size = std::min<uint64_t>(file_size_, kEndSize + 0xffff);
  std::vector<unsigned char> tail(tail_size);
  pread_exact(fd_, path_, "the zip end of central directory", tail.data(), tail.size(), file_size_ - tail_size);
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail_size - kEndSize); i >= 0; --i) {
    const unsigned char* p = tail.data() + i;
    if (u32(p) == kEndOfDirectory && static_cast<uint64_t>(i) + kEndSize + u16(p + 20) == tail_size) {
      end = i;
      break;
    }
  }
  if (end < 0) fail("{}: no zip end of central directory record (truncated archive?)", path_);
  const unsigned char* e = tail.data() + end;
  const uint64_t end_at = file_size_ - tail_size + static_cast<uint64_t>(end);
  uint64_t count = u16(e + 10), dir_size = u32(e + 12), dir_offset = u32(e + 16);
  if (u16(e + 4) != 0 || u16(e + 6) != 0) fail("{}: a zip archive split over several disks is not read", path_);
  if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
    if (end_at < kLocatorSize) fail("{}: ZIP64 archive without its locator", path_);
    unsigned char loc[kLocatorSize];
    pread_exact(fd_, path_, "the ZIP64 locator", loc, sizeof loc, end_at - kLocatorSize);
    if (u32(loc) != kZip64Locator) fail("{}: ZIP64 archive without its locator", path_);
    const uint64_t at = u64(loc + 8);
    if (at > file_size_ || file_size_ - at < kZip64EndSize)
      fail("{}: the ZIP64 end of central directory lies outside the file (offset {}, file {} bytes)", path_, at,
           file_size_);
    unsigned char z[kZip64EndSize];
    pread_exact(fd_, path_, "the ZIP64 end of central directory", z, sizeof z, at);
    if (u32(z) != kZip64EndOfDirectory) fail("{}: bad ZIP64 end of central directory record", path_);
    count = u64(z + 32), dir_size = u64(z + 40), dir_offset = u64(z + 48);
  }
  if (dir_offset > file_size_ || dir_size > file_size_ - dir_offset)
    fail("{}: the zip central directory ({} bytes at {}) lies outside the file ({} bytes)", path_, dir_size, dir_offset,
         file_size_);
  if (count > dir_size / kCentralSize)
    fail("{}: the zip directory claims {} entries in {} bytes", path_, count, dir_size);
  std::vector<unsigned char> dir(dir_size);
  pread_exact(fd_, path_, "the zip central directory", dir.data(), dir.size(), dir_offset);
  size_t pos = 0;
  for (uint64_t n = 0; n < count; ++n) {
    if (dir.size() - pos < kCentralSize || u32(dir.data() + pos) != kCentralHeader)
      fail("{}: zip central directory entry {} is damaged", path_, n);
    const unsigned char* c = dir.data() + pos;
    const size_t name_len = u16(c + 28), extra_len = u16(c + 30), comment_len = u16(c + 32);
    if (dir.size() - pos - kCentralSize < name_len + extra_len + comment_len)
      fail("{}: zip central directory entry {} runs past the directory", path_, n);
    std::string name(reinterpret_cast<const char*>(c + kCentralSize), name_len);
    ZipEntry entry;
    entry.flags = u16(c + 8);
    entry.method = u16(c + 10);
    uint64_t compressed = u32(c + 20), size = u32(c + 24), local = u32(c + 42);
    // ZIP64's extra field holds, in this order, only the fields whose 32-bit value is all ones.
    const unsigned char* x = c + kCentralSize + name_len;
    for (size_t i = 0; i + 4 <= extra_len;) {
      const uint16_t id = u16(x + i), len = u16(x + i + 2);
      if (i + 4 + len > extra_len) fail("{}: zip entry '{}' has a damaged extra field", path_, name);
      if (id == kZip64Extra) {
        size_t at = i + 4;
        for (uint64_t* field : {&size, &compressed, &local}) {
          if (*field != 0xffffffff) continue;
          if (at + 8 > i + 4 + len) fail("{}: zip entry '{}' has a short ZIP64 extra field", path_, name);
          *field = u64(x + at);
          at += 8;
        }
      }
      i += 4 + len;
    }
    pos += kCentralSize + name_len + extra_len + comment_len;
    if (local > file_size_ || file_size_ - local < kLocalSize)
      fail("{}: zip entry '{}' has its local header outside the file (offset {})", path_, name, local);
    unsigned char h[kLocalSize];
    pread_exact(fd_, path_, "a zip local header", h, sizeof h, local);
    if (u32(h) != kLocalHeader) fail("{}: zip entry '{}' has no local header at offset {}", path_, name, local);
    entry.offset = local + kLocalSize + u16(h + 26) + u16(h + 28);
    entry.size = entry.method == 0 ? size : compressed;
    if (entry.method == 0 && compressed != size)
      fail("{}: zip entry '{}' is stored but its sizes differ ({} and {} bytes)", path_, name, compressed, size);
    if (entry.offset > file_size_ || entry.size > file_size_ - entry.offset)
      fail("{}: zip entry '{}' ({} bytes at {}) runs past the end of the file ({} bytes): truncated archive?", path_,
           name, entry.size, entry.offset, file_size_);
    if (!entries_.emplace(name, entry).second) fail("{}: the zip archive holds two entries named '{}'", path_, name);
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  if (it->second.flags & 1) fail("{}: zip entry '{}' is encrypted", path_, name);
  if (it->second.method != 0)
    fail(
        "{}: zip entry '{}' is compressed (method {}); torch.save stores its entries uncompressed and dscpp reads "
        "only those",
        path_, name, it->second.method);
  return &it->second;
}

std::string ZipReader::read_all(const std::string& name, uint64_t limit) const {
  const ZipEntry* e = find(name);
  if (!e) fail("{}: the zip archive has no entry '{}'", path_, name);
  if (e->size > limit) fail("{}: zip entry '{}' is {} bytes, more than the {} expected", path_, name, e->size, limit);
  std::string out(e->size, '\0');
  pread_exact(fd_, path_, "'" + name + "'", out.data(), out.size(), e->offset);
  return out;
}

}  // namespace dscpp::ckpt
