#include "token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace examples {
namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeader = 256 * sizeof(int32_t);

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

}  // namespace

TokenFile::TokenFile(const std::string& path, int raw_width, int64_t vocab_size) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    bad(path, "empty or unreadable token file");
  }
  const size_t file_bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED) bad(path, std::string("cannot map: ") + std::strerror(map_errno));
  map_.base = base;
  map_.bytes = file_bytes;
  const auto* bytes = static_cast<const unsigned char*>(base);
  int32_t header[3] = {};
  if (file_bytes >= kLlmcHeader) std::memcpy(header, bytes, sizeof header);
  size_t data_bytes = file_bytes;
  if (file_bytes >= kLlmcHeader && header[0] == kLlmcMagic) {
    if (header[1] != 1 && header[1] != 2) {
      bad(path, "llm.c header version " + std::to_string(header[1]) + ", expected 1 (uint16) or 2 (uint32)");
    }
    width_ = header[1] == 1 ? 2 : 4;
    count_ = header[2];
    data_bytes = file_bytes - kLlmcHeader;
    if (count_ < 0 || static_cast<size_t>(count_) * static_cast<size_t>(width_) != data_bytes) {
      const std::string got = std::to_string(data_bytes);
      bad(path, "llm.c header says " + std::to_string(header[2]) + " tokens of " + std::to_string(header[1] == 1 ? 2 : 4) +
                    " bytes, but " + got + " bytes follow the header");
    }
    tokens_ = bytes + kLlmcHeader;
    format_ = header[1] == 1 ? "llm.c v1 (uint16)" : "llm.c v2 (uint32)";
  } else {
    if (raw_width != 2 && raw_width != 4) {
      bad(path, "token width " + std::to_string(raw_width) + " bytes: expected 2 (uint16) or 4 (uint32)");
    }
    width_ = raw_width;
    if (data_bytes % static_cast<size_t>(width_) != 0) {
      bad(path, std::to_string(data_bytes) + " bytes is not a whole number of " + std::to_string(raw_width) +
                    "-byte tokens (no llm.c header found)");
    }
    count_ = static_cast<int64_t>(data_bytes / static_cast<size_t>(width_));
    tokens_ = bytes;
    format_ = width_ == 2 ? "raw uint16" : "raw uint32";
  }
  for (int64_t i = 0; i < count_; ++i) {
    const uint32_t t = at(i);
    if (t > max_) max_ = t;
    if (vocab_size > 0 && static_cast<int64_t>(t) >= vocab_size) {
      bad(path, "token " + std::to_string(i) + " is " + std::to_string(t) + ", outside the vocabulary of " +
                    std::to_string(vocab_size) + " (--vocab_size)");
    }
  }
}

TokenFile::Mapping::~Mapping() {
  if (base != nullptr) ::munmap(base, bytes);
}

}  // namespace examples
