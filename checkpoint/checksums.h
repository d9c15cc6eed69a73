// SHA-256 digests of a checkpoint's safetensors files, recorded in its manifest at save and
// checked at load and by zero-to-fp32: one for the header (the 8-byte length and the JSON) and
// one per tensor, so a flipped byte is named by file and tensor. A whole-file digest would
// not say which tensor, and `sha256sum` cannot check a digest of parts anyway, so the parts
// are what is recorded.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace dscpp::ckpt {

inline constexpr const char* kHeaderDigest = "__header__";

// Tensor name (or kHeaderDigest) → lowercase hex SHA-256.
using FileDigests = std::map<std::string, std::string>;

// Reads `path` once. Throws dscpp::Error naming the file when it cannot be read or its header
// is not a valid safetensors header.
FileDigests digest_safetensors(const std::string& path);

// "" when `path` matches `expected`; otherwise what differs, naming the file and the first part
// (header or tensor, in file order) whose digest differs, or a tensor missing on either side.
std::string verify_digests(const std::string& path, const FileDigests& expected);

// A SHA-256 fed piece by piece (OpenSSL); hex() ends it.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t bytes);
  std::string hex();  // lowercase

 private:
  void* ctx_;  // EVP_MD_CTX
};

// The lowercase hex SHA-256 of `bytes` bytes at `data`, or of a string.
std::string sha256_hex(const void* data, size_t bytes);
inline std::string sha256_hex(const std::string& text) { return sha256_hex(text.data(), text.size()); }

}  // namespace dscpp::ckpt
