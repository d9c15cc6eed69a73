#include "token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace examples {
namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeader = 256 * sizeof(int32_t);

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// Megatron's index (megatron/core/datasets/indexed_dataset.py, MMIDIDX version 1): the header,
// version u64, dtype code u8, sequence count u64, document count u64, then the sequence lengths
// (int32), their byte offsets into the .bin (int64) and the document starts (int64).
struct MegatronIndex {
  int width = 0;
  int64_t tokens = 0, sequences = 0, documents = 0;
};

MegatronIndex read_megatron_index(const std::string& idx, size_t bin_bytes) {
  std::ifstream in(idx, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto take = [&](void* out, size_t n) {
    if (at + n > text.size()) bad(idx, "truncated Megatron index (" + std::to_string(text.size()) + " bytes)");
    std::memcpy(out, text.data() + at, n);
    at += n;
  };
  char magic[9];
  take(magic, 9);
  if (std::memcmp(magic, "MMIDIDX\0\0", 9) != 0) bad(idx, "not a Megatron index (no MMIDIDX header)");
  uint64_t version = 0, sequences = 0, documents = 0;
  uint8_t code = 0;
  take(&version, 8);
  take(&code, 1);
  take(&sequences, 8);
  take(&documents, 8);
  if (version != 1) bad(idx, "Megatron index version " + std::to_string(version) + ", expected 1");
  MegatronIndex m;
  m.width = code == 8 ? 2 : code == 4 ? 4 : 0;  // uint16, int32
  if (m.width == 0) bad(idx, "Megatron dtype code " + std::to_string(code) + ": expected 8 (uint16) or 4 (int32)");
  m.sequences = static_cast<int64_t>(sequences);
  m.documents = documents > 0 ? static_cast<int64_t>(documents) - 1 : 0;  // the starts end with the count
  std::vector<int32_t> lengths(sequences);
  std::vector<int64_t> pointers(sequences);
  take(lengths.data(), sequences * sizeof(int32_t));
  take(pointers.data(), sequences * sizeof(int64_t));
  // Read in place as one token stream: the sequences must lie end to end, as Megatron's builder
  // writes them.
  int64_t offset = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    if (pointers[i] != offset)
      bad(idx, "sequence " + std::to_string(i) + " starts at byte " + std::to_string(pointers[i]) +
                   " of the .bin, not " + std::to_string(offset) +
                   " after the one before (sequences must lie end to end)");
    offset += static_cast<int64_t>(lengths[i]) * m.width;
    m.tokens += lengths[i];
  }
  if (static_cast<size_t>(offset) != bin_bytes)
    bad(idx, "its sequences hold " + std::to_string(offset) + " bytes, the .bin has " + std::to_string(bin_bytes));
  return m;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
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
  const std::string idx = ends_with(path, ".bin") ? path.substr(0, path.size() - 4) + ".idx" : std::string();
  if (!idx.empty() && ::access(idx.c_str(), R_OK) == 0) {
    const MegatronIndex m = read_megatron_index(idx, file_bytes);
    width_ = m.width;
    count_ = m.tokens;
    tokens_ = bytes;
    format_ = std::string("Megatron indexed (") + (m.width == 2 ? "uint16" : "int32") + "; " +
              std::to_string(m.sequences) + " sequences, " + std::to_string(m.documents) + " documents)";
  } else if (file_bytes >= kLlmcHeader && header[0] == kLlmcMagic) {
    if (header[1] != 1 && header[1] != 2) {
      bad(path, "llm.c header version " + std::to_string(header[1]) + ", expected 1 (uint16) or 2 (uint32)");
    }
    width_ = header[1] == 1 ? 2 : 4;
    count_ = header[2];
    data_bytes = file_bytes - kLlmcHeader;
    if (count_ < 0 || static_cast<size_t>(count_) * static_cast<size_t>(width_) != data_bytes) {
      const std::string got = std::to_string(data_bytes);
      bad(path, "llm.c header says " + std::to_string(header[2]) + " tokens of " +
                    std::to_string(header[1] == 1 ? 2 : 4) + " bytes, but " + got + " bytes follow the header");
    }
    tokens_ = bytes + kLlmcHeader;
    format_ = header[1] == 1 ? "llm.c v1 (uint16)" : "llm.c v2 (uint32)";
  } else {
    if (raw_width != 1 && raw_width != 2 && raw_width != 4) {
      bad(path, "token width " + std::to_string(raw_width) + " bytes: expected 1 (bytes), 2 (uint16) or 4 (uint32)");
    }
    width_ = raw_width;
    if (data_bytes % static_cast<size_t>(width_) != 0) {
      bad(path, std::to_string(data_bytes) + " bytes is not a whole number of " + std::to_string(raw_width) +
                    "-byte tokens (no llm.c header found)");
    }
    count_ = static_cast<int64_t>(data_bytes / static_cast<size_t>(width_));
    tokens_ = bytes;
    format_ = width_ == 1 ? "raw bytes" : width_ == 2 ? "raw uint16" : "raw uint32";
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
