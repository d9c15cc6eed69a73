// The entries of a zip archive as torch.save (torch >= 1.6) writes it: every entry stored, not
// compressed, so an entry is a byte range of the file that pread can serve in slices. The
// central directory is read (ZIP64 too: a multi-gigabyte checkpoint needs its 64-bit sizes and
// offsets), then each entry's local header, whose extra field (torch pads there to align the
// data) decides where the bytes begin. A compressed or encrypted entry is listed but refused
// when read, naming it: no torch writer makes one, and no zip library is a dependency here.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace dscpp::ckpt {

struct ZipEntry {
  uint64_t offset = 0;  // of the entry's bytes, from the start of the file
  uint64_t size = 0;    // bytes
  uint16_t method = 0;  // 0 = stored
  uint16_t flags = 0;
};

class ZipReader {
 public:
  // Reads the directory of the open file `fd` (`path` names it in errors). Throws dscpp::Error
  // naming the path for anything that is not a well-formed archive inside the file's bytes.
  ZipReader(int fd, std::string path);

  const std::map<std::string, ZipEntry>& entries() const { return entries_; }
  // The entry named `name`, checked to be readable (stored, unencrypted); nullptr if absent.
  const ZipEntry* find(const std::string& name) const;
  // The whole of a small entry (a pickle, a version record), at most `limit` bytes.
  std::string read_all(const std::string& name, uint64_t limit) const;

 private:
  int fd_;
  std::string path_;
  uint64_t file_size_ = 0;
  std::map<std::string, ZipEntry> entries_;
};

// Reads exactly n bytes at `offset` of `fd`, or throws dscpp::Error naming `path` and `what`.
void pread_exact(int fd, const std::string& path, const std::string& what, void* dst, size_t n, uint64_t offset);

}  // namespace dscpp::ckpt
