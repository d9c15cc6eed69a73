#include "launcher/file_identity.h"

#include "checkpoint/checksums.h"
#include "core/error.h"
#include "launcher/env_export.h"  // shell_quote

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace dscpp::launcher {
namespace {

constexpr std::uint32_t kPtNote = 4;
constexpr std::uint32_t kShtNote = 7;
constexpr std::uint32_t kNtGnuBuildId = 3;
// Note tables of real binaries are a few hundred bytes; the cap keeps a corrupt header from
// making us read (or allocate) a whole file.
constexpr std::uint64_t kMaxNoteBytes = 1 << 20;
constexpr std::uint64_t kMaxTableBytes = 1 << 22;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Up to `n` bytes at `offset` (fewer at the end of the file).
std::string read_at(int fd, std::uint64_t offset, std::uint64_t n, const std::string& path) {
  std::string buf(n, '\0');
  std::uint64_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read {}: {}", path, std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::uint64_t>(r);
  }
  buf.resize(got);
  return buf;
}

// Fields of an ELF file in its own byte order.
struct ElfReader {
  bool big_endian = false;
  std::uint64_t get(const std::string& b, std::uint64_t at, int bytes) const {
    if (at + bytes > b.size()) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      const auto byte = static_cast<unsigned char>(b[at + (big_endian ? i : bytes - 1 - i)]);
      v = (v << 8) | byte;
    }
    return v;
  }
};

std::string to_hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

// The build id among the notes at [offset, offset + size), each name and descriptor padded to
// `align` bytes (4, or 8 in 8-aligned ELF64 note segments such as .note.gnu.property's).
std::optional<ElfBuildId> find_in_notes(int fd, const ElfReader& e, std::uint64_t offset, std::uint64_t size,
                                        std::uint64_t align, const std::string& path) {
  if (size == 0 || size > kMaxNoteBytes) return std::nullopt;
  const std::string notes = read_at(fd, offset, size, path);
  align = align == 8 ? 8 : 4;
  auto pad = [align](std::uint64_t n) { return (n + align - 1) / align * align; };
  for (std::uint64_t at = 0; at + 12 <= notes.size();) {
    const std::uint64_t namesz = e.get(notes, at, 4), descsz = e.get(notes, at + 4, 4), type = e.get(notes, at + 8, 4);
    const std::uint64_t name_at = at + 12, desc_at = name_at + pad(namesz);
    if (desc_at + descsz > notes.size()) break;
    if (type == kNtGnuBuildId && namesz == 4 && notes.compare(name_at, 4, std::string("GNU\0", 4)) == 0 && descsz > 0)
      return ElfBuildId{to_hex(std::string_view(notes).substr(desc_at, descsz)), offset + desc_at};
    at = desc_at + pad(descsz);
  }
  return std::nullopt;
}

std::optional<ElfBuildId> build_id_of(int fd, const std::string& path) {
  const std::string h = read_at(fd, 0, 64, path);
  if (h.size() < 52 || h.compare(0, 4,
                                 "\x7f"
                                 "ELF") != 0)
    return std::nullopt;
  const bool is64 = h[4] == 2;
  if ((h[4] != 1 && !is64) || (h[5] != 1 && h[5] != 2) || (is64 && h.size() < 64)) return std::nullopt;
  ElfReader e{h[5] == 2};
  const int word = is64 ? 8 : 4;
  const std::uint64_t phoff = e.get(h, is64 ? 0x20 : 0x1C, word), shoff = e.get(h, is64 ? 0x28 : 0x20, word);
  const std::uint64_t phentsize = e.get(h, is64 ? 0x36 : 0x2A, 2), phnum = e.get(h, is64 ? 0x38 : 0x2C, 2);
  const std::uint64_t shentsize = e.get(h, is64 ? 0x3A : 0x2E, 2), shnum = e.get(h, is64 ? 0x3C : 0x30, 2);

  // Executables and shared objects: the loader's view, which every linked file has.
  if (phnum > 0 && phentsize >= (is64 ? 56u : 32u) && phentsize * phnum <= kMaxTableBytes) {
    const std::string ph = read_at(fd, phoff, phentsize * phnum, path);
    for (std::uint64_t i = 0; i < phnum && (i + 1) * phentsize <= ph.size(); ++i) {
      const std::uint64_t p = i * phentsize;
      if (e.get(ph, p, 4) != kPtNote) continue;
      const std::uint64_t off = e.get(ph, p + (is64 ? 8 : 4), word), size = e.get(ph, p + (is64 ? 32 : 16), word);
      const std::uint64_t align = e.get(ph, p + (is64 ? 48 : 28), word);
      if (auto id = find_in_notes(fd, e, off, size, align, path)) return id;
    }
    return std::nullopt;
  }
  // Object files have sections only.
  if (shnum > 0 && shentsize >= (is64 ? 64u : 40u) && shentsize * shnum <= kMaxTableBytes) {
    const std::string sh = read_at(fd, shoff, shentsize * shnum, path);
    for (std::uint64_t i = 0; i < shnum && (i + 1) * shentsize <= sh.size(); ++i) {
      const std::uint64_t s = i * shentsize;
      if (e.get(sh, s + 4, 4) != kShtNote) continue;
      const std::uint64_t off = e.get(sh, s + (is64 ? 24 : 16), word), size = e.get(sh, s + (is64 ? 32 : 20), word);
      const std::uint64_t align = e.get(sh, s + (is64 ? 48 : 32), word);
      if (auto id = find_in_notes(fd, e, off, size, align, path)) return id;
    }
  }
  return std::nullopt;
}

std::string short_digest(const std::string& hex) {
  return hex.size() > 12 ? hex.substr(0, 12) + "..." : hex;
}

}  // namespace

std::optional<ElfBuildId> elf_build_id(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  return build_id_of(fd.get(), path);
}

std::string FileIdentity::describe() const {
  return build_id ? "build id " + short_digest(build_id->hex) : "sha256 " + short_digest(sha256);
}

FileIdentity identify_file(const std::string& path) {
  FileIdentity id;
  id.path = path;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0) {
    id.problem = errno == ENOENT ? "does not exist" : fmt::format("cannot be opened ({})", std::strerror(errno));
    return id;
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    id.problem = "is not a regular file";
    return id;
  }
  id.size = static_cast<std::uint64_t>(st.st_size);
  try {
    id.build_id = build_id_of(fd.get(), path);
    if (!id.build_id) {
      ckpt::Sha256 sha;
      std::vector<char> buf(1 << 20);
      for (std::uint64_t at = 0;;) {
        ssize_t r = ::pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(at));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail("cannot read {}: {}", path, std::strerror(errno));
        if (r == 0) break;
        sha.update(buf.data(), static_cast<size_t>(r));
        at += static_cast<std::uint64_t>(r);
      }
      id.sha256 = sha.hex();
    }
  } catch (const Error& e) {
    id.problem = fmt::format("cannot be read ({})", e.what());
  }
  return id;
}

std::string identity_probe(const FileIdentity& local) {
  // Prints "SIZE DIGEST", or one word when the file is not there to read. 2>/dev/null: od
  // complains about an offset past the end of a shorter file, which is a mismatch, not an error.
  const std::string digest = local.build_id
                                 ? fmt::format("od -An -v -tx1 -j {} -N {} <\"$f\" 2>/dev/null | tr -d ' \\n'",
                                               local.build_id->offset, local.build_id->hex.size() / 2)
                                 : std::string("sha256sum <\"$f\" 2>/dev/null | cut -c1-64");
  return fmt::format(
      "f={}; if [ ! -e \"$f\" ]; then echo missing; elif [ ! -f \"$f\" ]; then echo not-regular; "
      "elif [ ! -r \"$f\" ]; then echo unreadable; else echo \"$(wc -c <\"$f\") $({})\"; fi",
      shell_quote(local.path), digest);
}

ProbeVerdict compare_probe(const FileIdentity& local, std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line == "missing") return {ProbeVerdict::missing, ""};
  if (line == "not-regular") return {ProbeVerdict::not_regular, ""};
  if (line == "unreadable") return {ProbeVerdict::unreadable, ""};
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);  // BSD wc pads the count
  const size_t space = line.find(' ');
  if (space == std::string_view::npos)
    return {ProbeVerdict::no_answer,
            line.empty() ? "the check printed nothing" : fmt::format("the check printed `{}`", line.substr(0, 80))};
  std::string_view size = line.substr(0, space), digest = line.substr(space + 1);
  if (size != std::to_string(local.size))
    return {ProbeVerdict::different, fmt::format("{} bytes there, {} here", size, local.size)};
  const std::string& expected = local.build_id ? local.build_id->hex : local.sha256;
  if (digest.empty())
    return {ProbeVerdict::no_answer,
            fmt::format("`{}` printed nothing there (is it installed?)", local.build_id ? "od" : "sha256sum")};
  if (digest == expected) return {ProbeVerdict::same, ""};
  // A different build id sits elsewhere in the file, so the bytes read there mean nothing.
  if (local.build_id) return {ProbeVerdict::different, fmt::format("{} here, not there", local.describe())};
  return {ProbeVerdict::different,
          fmt::format("{} here, sha256 {} there", local.describe(), short_digest(std::string(digest)))};
}

}  // namespace dscpp::launcher
