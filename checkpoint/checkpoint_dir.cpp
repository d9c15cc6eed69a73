// Checkpoint directory commit protocol (see checkpoint_dir.h). Plain POSIX calls rather than
// std::filesystem where durability matters: we need fsync on files and directories and the
// exact errno of each step in the message.
#include "checkpoint/checkpoint_dir.h"

#include "core/error.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

namespace dscpp::ckpt {
namespace {

constexpr const char* kPartial = ".partial";
constexpr const char* kOld = ".old";  // a replaced tag directory, removed after the commit


bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Tags become directory names next to `latest`: reject what would escape save_dir or collide.
void check_tag(const std::string& tag) {
  if (tag.empty() || tag == "." || tag == ".." || tag == "latest" || tag.find('/') != std::string::npos ||
      tag.find('\0') != std::string::npos || tag.front() == '.')
    fail("checkpoint tag '{}' is not usable as a directory name (empty, '.', '..', 'latest', a leading '.' or a '/')",
         tag);
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir -p that tolerates other ranks creating the same directories concurrently.
void make_dirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    cur = path.substr(0, next);
    pos = next + 1;
    if (cur.empty()) continue;  // leading '/'
    if (::mkdir(cur.c_str(), 0755) != 0) {
      int err = errno;
      if (err == EEXIST && is_dir(cur)) continue;
      if (err == EEXIST) err = ENOTDIR;  // a regular file where a directory must go
      fail("checkpoint: cannot create directory {}: {}", cur, std::strerror(err));
    }
  }
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail("checkpoint: cannot open {} to fsync it: {}", path, std::strerror(errno));
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    // Some filesystems refuse fsync on directories; the data files were synced already.
    if (directory && (err == EINVAL || err == EROFS)) return;
    fail("checkpoint: fsync of {} failed: {}", path, std::strerror(err));
  }
  ::close(fd);
}

// fsync every file below `dir`, then every directory bottom-up (so each entry is durable
// before the directory that names it).
void fsync_tree(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) fail("checkpoint: cannot list {}: {}", dir, std::strerror(errno));
  std::vector<std::pair<std::string, bool>> entries;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      int err = errno;
      ::closedir(d);
      fail("checkpoint: cannot stat {}: {}", path, std::strerror(err));
    }
    if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) entries.emplace_back(path, S_ISDIR(st.st_mode));
  }
  ::closedir(d);
  for (const auto& [path, sub] : entries) {
    if (sub)
      fsync_tree(path);
    else
      fsync_path(path, false);
  }
  fsync_path(dir, true);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) fail("checkpoint: cannot remove {}: {}", path, ec.message());
}

void rename_or_fail(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail("checkpoint: cannot rename {} to {}: {}", from, to, std::strerror(errno));
}

std::string staging_path(const std::string& save_dir, const std::string& tag) {
  return save_dir + "/." + tag + kPartial;
}

}  // namespace

std::string checkpoint_staging_dir(const std::string& save_dir, const std::string& tag) {
  check_tag(tag);
  std::string staging = staging_path(save_dir, tag);
  make_dirs(staging);
  return staging;
}

void commit_checkpoint(const std::string& save_dir, const std::string& tag) {
  check_tag(tag);
  const std::string staging = staging_path(save_dir, tag);
  const std::string final_dir = save_dir + "/" + tag;
  if (!is_dir(staging)) fail("checkpoint: staging directory {} does not exist (nothing to commit)", staging);
  fsync_tree(staging);

  struct stat st {};
  bool replacing = ::lstat(final_dir.c_str(), &st) == 0;
  if (!replacing) {
    rename_or_fail(staging, final_dir);
  } else {
    if (!S_ISDIR(st.st_mode)) fail("checkpoint: {} exists and is not a directory", final_dir);
    // Atomic swap: <tag> becomes the new checkpoint and the staging name holds the old one,
    // so no instant exists without a complete <tag>.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_path(save_dir, true);
      remove_tree(staging);  // now the old checkpoint
    } else {
      if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        fail("checkpoint: cannot exchange {} and {}: {}", staging, final_dir, std::strerror(errno));
      // No RENAME_EXCHANGE on this filesystem: move the old one aside first. A crash between
      // the two renames leaves .<tag>.old, which remove_stale_staging() moves back.
      const std::string old = save_dir + "/." + tag + kOld;
      if (::lstat(old.c_str(), &st) == 0) remove_tree(old);
      rename_or_fail(final_dir, old);
      rename_or_fail(staging, final_dir);
      fsync_path(save_dir, true);
      remove_tree(old);
    }
  }
  fsync_path(save_dir, true);
  // `latest` last: until here a crash leaves `latest` naming the previous, complete tag.
  write_file_atomic(save_dir + "/latest", tag);
}

std::optional<std::string> read_latest_tag(const std::string& save_dir) {
  const std::string latest = save_dir + "/latest";
  int fd = ::open(latest.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    fail("checkpoint: cannot open {}: {}", latest, std::strerror(errno));
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      fail("checkpoint: cannot read {}: {}", latest, std::strerror(err));
    }
    if (r == 0) break;
    text.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  // DeepSpeed writes the bare tag and reads it back with strip().
  const char* ws = " \t\r\n";
  size_t b = text.find_first_not_of(ws);
  if (b == std::string::npos) fail("checkpoint: {} is empty (expected a tag)", latest);
  std::string tag = text.substr(b, text.find_last_not_of(ws) - b + 1);
  // A tag is a directory inside save_dir: `latest` must not lead a load anywhere else.
  if (tag == "." || tag == ".." || tag.find('/') != std::string::npos || tag.find('\0') != std::string::npos ||
      tag.front() == '.')
    fail("checkpoint: {} names '{}', which is not a checkpoint directory inside {} (a tag is a plain directory "
         "name: no '/', '..' or leading '.'); refusing to load from outside the save directory",
         latest, tag, save_dir);
  const std::string dir = save_dir + "/" + tag;
  if (!is_dir(dir)) fail("checkpoint: {} names tag '{}', but {} does not exist", latest, tag, dir);
  return tag;
}

std::string tag_dir_to_load(const std::string& load_dir, const std::string& load_tag) {
  std::optional<std::string> tag = load_tag;
  if (tag->empty()) tag = read_latest_tag(load_dir);
  if (!tag) fail("--load_dir {}: there is no `latest` file, so no checkpoint to load (--load_tag names one)", load_dir);
  const std::string dir = (std::filesystem::path(load_dir) / *tag).string();
  if (!load_tag.empty() && !std::filesystem::is_directory(dir)) {
    std::vector<std::string> tags;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(load_dir, ec))
      if (e.is_directory() && e.path().filename().string()[0] != '.') tags.push_back(e.path().filename().string());
    std::sort(tags.begin(), tags.end());
    fail("--load_tag {}: {} is not a checkpoint directory; {} holds {}", load_tag, dir, load_dir,
         tags.empty() ? std::string("none") : fmt::format("{}", fmt::join(tags, ", ")));
  }
  return dir;
}

std::vector<std::string> remove_stale_staging(const std::string& save_dir) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(save_dir.c_str());
  if (!d) {
    if (errno == ENOENT) return removed;
    fail("checkpoint: cannot list {}: {}", save_dir, std::strerror(errno));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : names) {
    if (name.size() < 2 || name[0] != '.') continue;
    const std::string path = save_dir + "/" + name;
    if (ends_with(name, kPartial) && name.size() > 1 + std::strlen(kPartial)) {
      remove_tree(path);
      removed.push_back(path);
    } else if (ends_with(name, kOld) && name.size() > 1 + std::strlen(kOld) && is_dir(path)) {
      // A replaced tag moved aside by the fallback path: restore it if the crash came
      // before the new directory took its name, otherwise it is garbage.
      std::string tag_dir = save_dir + "/" + name.substr(1, name.size() - 1 - std::strlen(kOld));
      struct stat st {};
      if (::lstat(tag_dir.c_str(), &st) != 0 && errno == ENOENT) {
        rename_or_fail(path, tag_dir);
      } else {
        remove_tree(path);
        removed.push_back(path);
      }
    }
  }
  return removed;
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create {}: {}", tmp, std::strerror(errno));
  const char* p = contents.data();
  size_t n = contents.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      ::close(fd);
      fail("cannot write {}: {}", tmp, std::strerror(err));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail("fsync of {} failed: {}", tmp, std::strerror(err));
  }
  if (::close(fd) != 0) fail("cannot close {}: {}", tmp, std::strerror(errno));
  rename_or_fail(tmp, path);
  auto slash = path.rfind('/');
  fsync_path(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)), true);
}

}  // namespace dscpp::ckpt
