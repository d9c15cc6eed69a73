// Token files, the pre-tokenized data language models train on, read in place (mmap):
//   llm.c's format: a header of 256 little-endian int32 (magic 20240520, version 1 = uint16
//   tokens or 2 = uint32 tokens, the token count), then the tokens;
//   Megatron's indexed dataset: PREFIX.bin with PREFIX.idx beside it (MMIDIDX version 1, uint16
//   or int32 tokens, sequences end to end), read as one stream in sequence order;
//   a headerless array of little-endian uint16 (nanoGPT's train.bin / val.bin) or uint32, or of
//   bytes (any file, e.g. a text, as byte-level tokens 0–255).
// Every token is checked against the vocabulary once, at open. Plugins only: it needs nothing
// but the standard library and POSIX, and reports errors as std::runtime_error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace examples {

class TokenFile {
 public:
  // `raw_width`: bytes per token (1, 2 or 4) of a headerless file; ignored for llm.c files.
  // `vocab_size` > 0: every token must be below it.
  TokenFile(const std::string& path, int raw_width, int64_t vocab_size);
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  uint32_t at(int64_t i) const {
    return width_ == 1   ? static_cast<uint32_t>(static_cast<const uint8_t*>(tokens_)[i])
           : width_ == 2 ? static_cast<uint32_t>(static_cast<const uint16_t*>(tokens_)[i])
                         : static_cast<const uint32_t*>(tokens_)[i];
  }
  uint32_t max_token() const { return max_; }
  const std::string& format() const { return format_; }  // e.g. "llm.c v1 (uint16)"

 private:
  // Unmapped by its destructor, also when the constructor throws after mapping.
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
    ~Mapping();
  };
  std::string path_, format_;
  Mapping map_;
  const void* tokens_ = nullptr;
  int width_ = 2;
  int64_t count_ = 0;
  uint32_t max_ = 0;
};

}  // namespace examples
