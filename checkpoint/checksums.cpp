#include "checkpoint/checksums.h"

#include "checkpoint/safetensors.h"
#include "core/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace dscpp::ckpt {
namespace {

constexpr size_t kChunk = 4 << 20;  // bytes read per pread

// Closes its descriptor on every path out.
class ReadFile {
 public:
  explicit ReadFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail("cannot open {} to check it: {}", path, std::strerror(errno));
  }
  ~ReadFile() { ::close(fd_); }
  // Where the data section starts: the 8-byte little-endian header length, plus 8.
  uint64_t header_end() const {
    unsigned char len[8];
    if (::pread(fd_, len, 8, 0) != 8) fail("cannot read {}'s header length", path_);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    return 8 + n;
  }
  // The SHA-256 of bytes [offset, offset + bytes).
  std::string digest(uint64_t offset, uint64_t bytes, std::vector<unsigned char>& buffer) const {
    Sha256 d;
    while (bytes > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, buffer.size()));
      const ssize_t r = ::pread(fd_, buffer.data(), n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail("cannot read {} at byte {}: {}", path_, offset, r < 0 ? std::strerror(errno) : "end of file");
      d.update(buffer.data(), static_cast<size_t>(r));
      offset += static_cast<uint64_t>(r);
      bytes -= static_cast<uint64_t>(r);
    }
    return d.hex();
  }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    fail("SHA-256: OpenSSL could not start a digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t bytes) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, bytes) != 1) fail("SHA-256: OpenSSL digest update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len) != 1) fail("SHA-256: OpenSSL digest final failed");
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

std::string sha256_hex(const void* data, size_t bytes) {
  Sha256 d;
  d.update(data, bytes);
  return d.hex();
}

FileDigests digest_safetensors(const std::string& path) {
  const SafetensorsFile file(path);  // validates the header, so its length and offsets can be trusted
  const ReadFile raw(path);
  std::vector<unsigned char> buffer(kChunk);
  FileDigests out;
  out[kHeaderDigest] = raw.digest(0, raw.header_end(), buffer);
  for (const TensorInfo& t : file.tensors()) out[t.name] = raw.digest(t.offset, t.bytes, buffer);
  return out;
}

std::string verify_digests(const std::string& path, const FileDigests& expected) {
  const FileDigests found = digest_safetensors(path);
  // Header first, then tensors in file order: the first difference is the one worth naming.
  auto header = expected.find(kHeaderDigest);
  if (header == expected.end() || header->second != found.at(kHeaderDigest))
    return fmt::format("{}: its header (tensor names, shapes, offsets, metadata) differs from the one recorded at save",
                       path);
  const SafetensorsFile file(path);
  for (const TensorInfo& t : file.tensors()) {
    auto e = expected.find(t.name);
    if (e == expected.end()) return fmt::format("{}: tensor {} was not in the file at save", path, t.name);
    if (e->second != found.at(t.name))
      return fmt::format("{}: tensor {} ({} bytes at offset {}) differs from what was saved (SHA-256 {}, recorded {})",
                         path, t.name, t.bytes, t.offset, found.at(t.name), e->second);
  }
  for (const auto& [name, digest] : expected)
    if (name != kHeaderDigest && !file.find(name))
      return fmt::format("{}: tensor {} recorded at save is missing", path, name);
  return "";
}

}  // namespace dscpp::ckpt
