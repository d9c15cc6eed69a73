// examples/common/token_file.h: llm.c's header format (both versions) and headerless
// uint16/uint32 files read back token for token, and every malformed file named with its fault.
#include "token_file.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_tokens_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

template <class T>
std::string write(const std::string& path, const std::vector<int32_t>& header, const std::vector<T>& tokens) {
  std::ofstream f(path, std::ios::binary);
  if (!header.empty()) {
    std::vector<int32_t> h(256, 0);
    for (size_t i = 0; i < header.size(); ++i) h[i] = header[i];
    f.write(reinterpret_cast<const char*>(h.data()), 256 * sizeof(int32_t));
  }
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(T)));
  return path;
}

}  // namespace

TEST_CASE("token files: llm.c v1/v2 and headerless uint16/uint32 read back exactly", "[tokens]") {
  TempDir d;
  std::vector<uint16_t> small;
  std::vector<uint32_t> large;
  for (uint32_t i = 0; i < 1000; ++i) {
    small.push_back(static_cast<uint16_t>((i * 37) % 50257));
    large.push_back((i * 104729u) % 128256u);
  }
  const examples::TokenFile v1(write(d.path + "/v1.bin", {20240520, 1, 1000}, small), 4, 50257);
  const examples::TokenFile v2(write(d.path + "/v2.bin", {20240520, 2, 1000}, large), 2, 128256);
  const examples::TokenFile raw16(write<uint16_t>(d.path + "/raw16.bin", {}, small), 2, 0);
  const examples::TokenFile raw32(write<uint32_t>(d.path + "/raw32.bin", {}, large), 4, 0);
  CHECK(v1.format() == "llm.c v1 (uint16)");
  CHECK(v2.format() == "llm.c v2 (uint32)");
  CHECK(raw16.format() == "raw uint16");
  CHECK(raw32.format() == "raw uint32");
  for (const examples::TokenFile* f : {&v1, &v2, &raw16, &raw32}) REQUIRE(f->size() == 1000);
  uint32_t max_small = 0, max_large = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    CHECK(v1.at(i) == small[static_cast<size_t>(i)]);
    CHECK(raw16.at(i) == small[static_cast<size_t>(i)]);
    CHECK(v2.at(i) == large[static_cast<size_t>(i)]);
    CHECK(raw32.at(i) == large[static_cast<size_t>(i)]);
    max_small = std::max<uint32_t>(max_small, small[static_cast<size_t>(i)]);
    max_large = std::max(max_large, large[static_cast<size_t>(i)]);
  }
  CHECK(v1.max_token() == max_small);
  CHECK(v2.max_token() == max_large);
  // Bytes: any file (a text) as byte-level tokens.
  std::vector<uint8_t> text;
  for (char ch : std::string("Q: Why is this so?\nA: Because.\n")) text.push_back(static_cast<uint8_t>(ch));
  const examples::TokenFile bytes(write<uint8_t>(d.path + "/text.txt", {}, text), 1, 256);
  CHECK(bytes.format() == "raw bytes");
  REQUIRE(bytes.size() == static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) CHECK(bytes.at(static_cast<int64_t>(i)) == text[i]);
  CHECK_THROWS_WITH(examples::TokenFile(d.path + "/text.txt", 1, 100), Contains("outside the vocabulary of 100"));
}

TEST_CASE("token files: every malformed file is refused, naming the file and the fault", "[tokens]") {
  TempDir d;
  const std::vector<uint16_t> toks = {1, 2, 3, 4};
  auto refused = [](const std::string& path, int width, int64_t vocab, const std::string& what) {
    CHECK_THROWS_WITH(examples::TokenFile(path, width, vocab), Contains(path) && Contains(what));
  };
  refused(d.path + "/absent.bin", 2, 0, "cannot open");
  refused(write(d.path + "/v3.bin", {20240520, 3, 4}, toks), 2, 0, "llm.c header version 3, expected 1");
  refused(write(d.path + "/count.bin", {20240520, 1, 5}, toks), 2, 0, "header says 5 tokens of 2 bytes, but 8 bytes");
  refused(write<uint8_t>(d.path + "/odd.bin", {}, {1, 2, 3}), 2, 0, "3 bytes is not a whole number of 2-byte tokens");
  refused(write<uint16_t>(d.path + "/vocab.bin", {}, {1, 2, 60, 3}), 2, 50,
          "token 2 is 60, outside the vocabulary of 50");
  refused(write<uint16_t>(d.path + "/width.bin", {}, toks), 3, 0, "token width 3 bytes");
  std::ofstream(d.path + "/empty.bin").close();
  refused(d.path + "/empty.bin", 2, 0, "empty");
}

namespace {
// PREFIX.bin and PREFIX.idx as Megatron's builder writes them (MMIDIDX version 1).
void write_megatron(const std::string& prefix, uint8_t code, const std::vector<std::vector<uint16_t>>& docs,
                    int64_t skew = 0) {
  std::ofstream bin(prefix + ".bin", std::ios::binary), idx(prefix + ".idx", std::ios::binary);
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers, starts{0};
  int64_t at = 0;
  for (const auto& d : docs) {
    bin.write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size() * 2));
    lengths.push_back(static_cast<int32_t>(d.size()));
    pointers.push_back(at + (pointers.size() == 1 ? skew : 0));
    at += static_cast<int64_t>(d.size()) * 2;
    starts.push_back(static_cast<int64_t>(starts.size()));
  }
  const uint64_t version = 1, n = lengths.size(), ndocs = starts.size();
  idx.write("MMIDIDX\0\0", 9);
  idx.write(reinterpret_cast<const char*>(&version), 8);
  idx.write(reinterpret_cast<const char*>(&code), 1);
  idx.write(reinterpret_cast<const char*>(&n), 8);
  idx.write(reinterpret_cast<const char*>(&ndocs), 8);
  idx.write(reinterpret_cast<const char*>(lengths.data()), static_cast<std::streamsize>(n * 4));
  idx.write(reinterpret_cast<const char*>(pointers.data()), static_cast<std::streamsize>(n * 8));
  idx.write(reinterpret_cast<const char*>(starts.data()), static_cast<std::streamsize>(ndocs * 8));
}
}  // namespace

TEST_CASE("token files: Megatron's indexed dataset reads as one stream in sequence order", "[tokens]") {
  TempDir d;
  const std::vector<std::vector<uint16_t>> docs = {{5, 6, 7}, {8}, {9, 10, 11, 12}};
  write_megatron(d.path + "/ds", 8, docs);
  const examples::TokenFile f(d.path + "/ds.bin", 4, 13);
  CHECK(f.format() == "Megatron indexed (uint16; 3 sequences, 3 documents)");
  REQUIRE(f.size() == 8);
  for (int64_t i = 0; i < 8; ++i) CHECK(f.at(i) == static_cast<uint32_t>(5 + i));
  // Sequences that do not lie end to end, and a dtype the reader does not take, are named.
  write_megatron(d.path + "/gap", 8, docs, 2);
  CHECK_THROWS_WITH(examples::TokenFile(d.path + "/gap.bin", 2, 0),
                    Contains("gap.idx") && Contains("sequence 1 starts at byte 8 of the .bin, not 6"));
  write_megatron(d.path + "/f64", 6, docs);
  CHECK_THROWS_WITH(examples::TokenFile(d.path + "/f64.bin", 2, 0), Contains("Megatron dtype code 6"));
}
