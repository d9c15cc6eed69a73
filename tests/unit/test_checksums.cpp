// SHA-256 digests of checkpoint files (checkpoint/checksums.h) and the manifest's own digest:
// the known-answer vectors of FIPS 180-2, every part of a safetensors file named when one of
// its bytes flips, and a manifest edited after save refused.
#include "checkpoint/checksums.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "tests/unit/layout_fixture.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::ckpt;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_checksums_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("SHA-256 known answers (FIPS 180-2)", "[checksums]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("a flipped byte anywhere in a safetensors file is named by file and part", "[checksums]") {
  TempDir dir;
  const std::string path = dir.path + "/zero_pp_rank_0_partitions.safetensors";
  std::vector<float> a(1000), b(5000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(i);
  // One tensor from memory, one streamed through a fill: the writer's digests are the reader's.
  auto fill_b = [&](int64_t first, int64_t count, void* dst) {
    std::copy_n(b.data() + first, count, static_cast<float*>(dst));
  };
  const FileDigests written = write_safetensors(
      path, {{"fp32", DType::f32, {1000}, a.data(), {}}, {"exp_avg", DType::f32, {5000}, nullptr, fill_b}},
      {{"format", "dscpp"}});
  const FileDigests saved = digest_safetensors(path);
  REQUIRE(saved.size() == 3);
  CHECK(written == saved);
  CHECK(verify_digests(path, saved).empty());

  const SafetensorsFile file(path);
  for (const TensorInfo& t : file.tensors()) {
    for (uint64_t at : {t.offset, t.offset + t.bytes / 2, t.offset + t.bytes - 1}) {
      flip_byte(path, at);
      const std::string problem = verify_digests(path, saved);
      INFO("flipped byte " << at << " of " << t.name);
      CHECK_THAT(problem, Catch::Contains(path) && Catch::Contains("tensor " + t.name) &&
                              Catch::Contains("differs from what was saved"));
      flip_byte(path, at);  // back
      CHECK(verify_digests(path, saved).empty());
    }
  }
  // In the header: inside the metadata string, which still parses.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t meta = bytes.find("dscpp");
  REQUIRE(meta != std::string::npos);
  flip_byte(path, meta);
  CHECK_THAT(verify_digests(path, saved), Catch::Contains("its header"));
  flip_byte(path, meta);
  // A tensor the manifest recorded but the file lacks, and the other way round.
  FileDigests extra = saved;
  extra["exp_avg_sq"] = saved.at("exp_avg");
  CHECK_THAT(verify_digests(path, extra), Catch::Contains("tensor exp_avg_sq recorded at save is missing"));
}

TEST_CASE("digests of a tensor larger than one read agree with the digest of its bytes", "[checksums]") {
  TempDir dir;
  const std::string path = dir.path + "/big.safetensors";
  std::vector<float> big(3 << 20);  // 12 MiB: three 4 MiB reads
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 977);
  const FileDigests written =
      write_safetensors(path, {{"w", DType::f32, {static_cast<int64_t>(big.size())}, big.data(), {}}});
  CHECK(digest_safetensors(path).at("w") == sha256_hex(big.data(), big.size() * sizeof(float)));
  CHECK(written.at("w") == sha256_hex(big.data(), big.size() * sizeof(float)));
}

TEST_CASE("a manifest edited after save is refused; files.sha256 round-trips", "[checksums]") {
  TempDir dir;
  Manifest m;
  m.layout = test::make_layout(1, {{10, 20}});
  m.optimizer_type = "AdamW";
  m.storage = Storage::by_name;
  m.files = {kModelFile, kOptimizerFile};
  m.checksums[kModelFile] = {{kHeaderDigest, std::string(64, 'a')}, {"p0", std::string(64, 'b')}};
  m.checksums[kOptimizerFile] = {{kHeaderDigest, std::string(64, 'c')}};
  std::ofstream(dir.path + "/" + kManifestFile) << manifest_json(m).dump(2);
  Manifest read = read_manifest(dir.path);
  CHECK(read.checksums == m.checksums);

  nlohmann::json j = manifest_json(m);
  j["global_steps"] = 7;  // still a valid manifest, but not the one saved
  std::ofstream(dir.path + "/" + kManifestFile) << j.dump(2);
  CHECK_THROWS_WITH(read_manifest(dir.path), Catch::Contains("manifest.json was changed after it was saved"));
  j = manifest_json(m);
  j["files"]["sha256"].erase(kOptimizerFile);
  j.erase(kSelfDigest);
  std::ofstream(dir.path + "/" + kManifestFile) << j.dump(2);
  CHECK_THROWS_WITH(read_manifest(dir.path), Catch::Contains("files.sha256 has no digests for optimizer.safetensors"));
}
