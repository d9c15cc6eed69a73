// A file opened with O_DIRECT for the async I/O engine, and the messages for what goes wrong
// with one (missing directory, permissions, no O_DIRECT support, disk full, file removed).
//
// O_DIRECT moves bytes between the device and the caller's buffer without the page cache, so
// swap traffic neither evicts the training job's memory nor double-buffers it; the price is
// that addresses, offsets and lengths must be multiples of kDirectIoAlignment.
#pragma once

#include <cstdint>
#include <string>

namespace dscpp::offload {

enum class OpenMode {
  read,        // existing file, O_RDONLY
  write,       // O_WRONLY | O_CREAT, mode 0600 (contents kept: swap slots are rewritten in place)
  read_write,  // O_RDWR | O_CREAT, mode 0600
};

class DirectFile {
 public:
  DirectFile() = default;
  // Throws dscpp::Error naming the path, the reason and the remedy (see describe_errno).
  DirectFile(const std::string& path, OpenMode mode);
  DirectFile(DirectFile&& o) noexcept { *this = std::move(o); }
  DirectFile& operator=(DirectFile&& o) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  ~DirectFile() { close(); }

  void close();
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool readable() const { return mode_ != OpenMode::write; }
  bool writable() const { return mode_ != OpenMode::read; }
  explicit operator bool() const { return fd_ >= 0; }

  int64_t size() const;
  // Reserves blocks for [0, bytes) without writing them (fallocate). On ext4 an O_DIRECT write
  // that extends a file is synchronous under libaio (platform.md: 0.32 vs 1.5 GB/s), so swap
  // files are preallocated to their final size. Disk full -> Error with free space and remedy.
  void preallocate(int64_t bytes);
  // Throws when the file has been unlinked since it was opened: writes to it would land in an
  // orphaned inode and vanish at close.
  void check_present() const;

 private:
  int fd_ = -1;
  std::string path_;
  OpenMode mode_ = OpenMode::read;
};

// "No space left on device: the filesystem holding /x has 0 B free of 1.00 GiB; free space or
// point nvme_path at a larger disk". The first sentence is strerror; the rest says why it
// happens to the engine and what to do, for the errors a user can act on.
std::string describe_errno(int err, const std::string& path);

// The message for a file unlinked while open (st_nlink == 0), or "" when it is still there.
std::string removed_underneath(int fd, const std::string& path);

}  // namespace dscpp::offload
