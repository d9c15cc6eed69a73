#include "offload/direct_file.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "offload/aligned_buffer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace dscpp::offload {
namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string space_of(const std::string& path) {
  struct statvfs v {};
  std::string dir = parent_of(path);
  if (statvfs(dir.c_str(), &v) != 0) return "";
  auto free_bytes = static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
  auto total = static_cast<int64_t>(v.f_blocks) * static_cast<int64_t>(v.f_frsize);
  return fmt::format(" (the filesystem holding {} has {} free of {})", dir, format_bytes(free_bytes),
                     format_bytes(total));
}

const char* mode_name(OpenMode m) {
  switch (m) {
    case OpenMode::read:
      return "reading";
    case OpenMode::write:
      return "writing";
    case OpenMode::read_write:
      return "reading and writing";
  }
  return "?";
}

}  // namespace

std::string describe_errno(int err, const std::string& path) {
  std::string what = std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return what + space_of(path) + "; free space or point nvme_path at a larger disk";
    case EACCES:
    case EPERM:
      return what + "; make " + parent_of(path) + " writable by this user or point nvme_path elsewhere";
    case EROFS:
      return what + "; " + parent_of(path) + " is on a read-only filesystem: point nvme_path at a writable disk";
    case EINVAL:
      return what + "; O_DIRECT needs buffer address, offset and length aligned to " +
             std::to_string(kDirectIoAlignment) +
             " bytes, and a filesystem that supports it (ext4, xfs; not NFS/FUSE in some setups)";
    case EIO:
      return what + "; the device reported an I/O error: check `dmesg` and the disk's health";
    case EMFILE:
    case ENFILE:
      return what + "; raise the open-file limit (`ulimit -n`)";
    default:
      return what;
  }
}

DirectFile::DirectFile(const std::string& path, OpenMode mode) : path_(path), mode_(mode) {
  int flags = O_DIRECT | O_CLOEXEC;
  flags |= mode == OpenMode::read ? O_RDONLY : mode == OpenMode::write ? (O_WRONLY | O_CREAT) : (O_RDWR | O_CREAT);
  fd_ = ::open(path.c_str(), flags, 0600);
  if (fd_ >= 0) return;
  int err = errno;
  if (err == ENOENT && mode == OpenMode::read)
    fail(
        "cannot open {} for reading: the file does not exist (was it removed underneath the job, e.g. by a "
        "cleanup of the swap directory?)",
        path);
  if (err == ENOENT)
    fail("cannot create {}: the directory {} does not exist (was the swap directory removed while the job ran?)", path,
         parent_of(path));
  if (err == EINVAL)
    fail(
        "cannot open {} with O_DIRECT: the filesystem does not support direct I/O; point nvme_path at a local "
        "disk (ext4, xfs)",
        path);
  fail("cannot open {} for {} (O_DIRECT): {}", path, mode_name(mode), describe_errno(err, path));
}

DirectFile& DirectFile::operator=(DirectFile&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    mode_ = o.mode_;
  }
  return *this;
}

void DirectFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int64_t DirectFile::size() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail("cannot stat {}: {}", path_, std::strerror(errno));
  return st.st_size;
}

void DirectFile::preallocate(int64_t bytes) {
  if (bytes <= 0) return;
  if (fallocate(fd_, 0, 0, bytes) == 0) return;
  int err = errno;
  // Not every filesystem can reserve blocks; writes then extend the file as they go (slower
  // on ext4 + libaio, still correct).
  if (err == EOPNOTSUPP) {
    log::debug("{}: fallocate is not supported here; the file grows as it is written", path_);
    return;
  }
  fail("cannot reserve {} for {}: {}", format_bytes(bytes), path_, describe_errno(err, path_));
}

std::string removed_underneath(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return fmt::format("cannot stat {}: {}", path, std::strerror(errno));
  if (st.st_nlink > 0) return "";
  return fmt::format(
      "{} was removed while the job was using it (another process deleted the file or the swap directory); "
      "what was written to it is lost. Keep nvme_path private to the job",
      path);
}

void DirectFile::check_present() const {
  std::string removed = removed_underneath(fd_, path_);
  if (!removed.empty()) throw Error(removed);
}

}  // namespace dscpp::offload
