// The checkpoint reader and zero-to-fp32 over synthetic checkpoints: every element's value is
// a closed-form function of (parameter, index, state), written into per-rank partition files
// (or by-name files) at the positions the layout rule gives, so each read is checked against
// the formula, not against the writer. Also: resharding reads (a 4-part checkpoint read into
// a 3-part layout), the manifest round trip, every file/manifest inconsistency named, and
// zero-to-fp32's bounded memory.
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_source.h"
#include "checkpoint/zero_to_fp32.h"
#include "core/error.h"
#include "tests/unit/layout_fixture.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace dscpp;
using namespace dscpp::ckpt;
using namespace dscpp::ckpt::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_reader_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

const std::vector<std::string> kStates = {"exp_avg", "exp_avg_sq"};

// The value of element k of parameter p's `what`: distinct per (p, k, what), exact in fp32.
float value(size_t p, int64_t k, const std::string& what) {
  float base = static_cast<float>(static_cast<int64_t>(p) * 100000 + k % 100000);
  if (what == kMasterWeights) return base;
  return what == "exp_avg" ? -base - 0.5f : base + 0.25f;
}

// The (parameter, index) at flat element e, or p = -1 for padding.
std::pair<int64_t, int64_t> param_at(const PartitionLayout& l, int64_t e) {
  for (size_t p = 0; p < l.params.size(); ++p)
    if (e >= l.params[p].offset && e < l.params[p].offset + l.params[p].numel)
      return {static_cast<int64_t>(p), e - l.params[p].offset};
  return {-1, 0};
}

Manifest manifest_for(const PartitionLayout& l, int stage, Storage storage) {
  Manifest m;
  m.zero_stage = stage;
  m.world_size = l.parts;
  m.global_steps = 7;
  m.layout = l;
  m.optimizer_type = "adamw";
  m.optimizer_states = kStates;
  m.optimizer_step = 7;
  m.storage = storage;
  if (storage == Storage::by_name)
    m.files = {kModelFile, kOptimizerFile};
  else
    for (int r = 0; r < l.parts; ++r) m.files.push_back(rank_file_name(r));
  m.doc = {{"train_batch_size", 12}};
  return m;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  std::ofstream(dir + "/" + kManifestFile) << manifest_json(m).dump(2);
}

// Writes a stage-`stage` checkpoint of layout `l` into <save_dir>/global_step7 (committed).
// Partition files are produced element by element from the formula through TensorFill.
std::string write_checkpoint(const std::string& save_dir, const PartitionLayout& l, int stage) {
  std::string staging = checkpoint_staging_dir(save_dir, "global_step7");
  Manifest m = manifest_for(l, stage, stage == 0 ? Storage::by_name : Storage::partitions);
  std::vector<std::string> whats{kMasterWeights};
  whats.insert(whats.end(), kStates.begin(), kStates.end());
  if (stage == 0) {
    std::vector<TensorToWrite> model, optim;
    for (size_t p = 0; p < l.params.size(); ++p) {
      for (const std::string& what : whats) {
        TensorToWrite t{what == kMasterWeights ? l.params[p].name : l.params[p].name + "/" + what, DType::f32,
                        l.params[p].shape, nullptr, [p, what](int64_t first, int64_t count, void* dst) {
                          for (int64_t k = 0; k < count; ++k) static_cast<float*>(dst)[k] = value(p, first + k, what);
                        }};
        (what == kMasterWeights ? model : optim).push_back(t);
      }
    }
    write_safetensors(staging + "/" + kModelFile, model);
    write_safetensors(staging + "/" + kOptimizerFile, optim);
  } else {
    for (int r = 0; r < l.parts; ++r) {
      std::vector<TensorToWrite> tensors;
      for (const std::string& what : whats)
        tensors.push_back(
            {what, DType::f32, {l.part_total}, nullptr, [&l, r, what](int64_t first, int64_t count, void* dst) {
               for (int64_t i = 0; i < count; ++i) {
                 int64_t at = first + i;
                 float v = 0;
                 for (const GroupDesc& g : l.groups)
                   if (at >= g.part_offset && at < g.part_offset + g.part) {
                     auto [p, k] = param_at(l, g.begin + r * g.part + (at - g.part_offset));
                     if (p >= 0) v = value(static_cast<size_t>(p), k, what);
                   }
                 static_cast<float*>(dst)[i] = v;
               }
             }});
      write_safetensors(staging + "/" + rank_file_name(r), tensors,
                        {{"rank", std::to_string(r)}, {"world_size", std::to_string(l.parts)}, {"global_steps", "7"}});
    }
  }
  write_manifest(staging, m);
  commit_checkpoint(save_dir, "global_step7");
  return save_dir + "/global_step7";
}

void check_reads(TensorSource& src, const PartitionLayout& l) {
  std::vector<float> buf;
  for (size_t p = 0; p < l.params.size(); ++p) {
    int64_t i = src.find(l.params[p].name);
    REQUIRE(i >= 0);
    const int64_t n = l.params[p].numel;
    for (const std::string& what : {std::string(kMasterWeights), kStates[0], kStates[1]})
      for (auto [first, count] : {std::pair<int64_t, int64_t>{0, n}, {n / 3, n - n / 3}, {n - 1, 1}}) {
        buf.assign(static_cast<size_t>(count), -1.0f);
        src.read(static_cast<size_t>(i), what, first, count, buf.data());
        for (int64_t k = 0; k < count; ++k) REQUIRE(buf[static_cast<size_t>(k)] == value(p, first + k, what));
      }
  }
}

// Resident-set figures of this process (KiB) from /proc/self/status.
int64_t status_kib(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  return -1;
}

}  // namespace

TEST_CASE("zero-to-fp32 streams: memory stays far below the size of the largest tensor") {
  TempDir dir;
  // One 64 MiB parameter over 2 ranks.
  const int64_t big = int64_t{16} << 20;
  PartitionLayout l = make_layout(2, {{big}, {1000}});
  std::string tag = write_checkpoint(dir.path, l, 2);
  // Reset the peak-RSS mark (Linux: clear_refs 5), so it measures the conversion alone.
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t rss_before = status_kib("VmRSS");
  ConsolidateResult r = zero_to_fp32(dir.path, dir.path + "/out.safetensors");
  const int64_t peak = status_kib("VmHWM");
  CHECK(r.numel == big + 1000);
  // Materialising the tensor would add 64 MiB (one rank's partition 32 MiB); the writer's
  // staging buffer is 16 MiB.
  const int64_t grown_mib = (peak - rss_before) / 1024;
  INFO("peak RSS " << peak / 1024 << " MiB, " << grown_mib << " MiB above the RSS before the conversion");
  REQUIRE(rss_before > 0);
  CHECK(grown_mib < 24);
  SafetensorsFile out(dir.path + "/out.safetensors");
  std::vector<float> tail(100);
  out.read("p0", big - 100, 100, tail.data(), DType::f32);
  for (int64_t k = 0; k < 100; ++k) REQUIRE(tail[static_cast<size_t>(k)] == value(0, big - 100 + k, kMasterWeights));
}

TEST_CASE("manifest round trip keeps the layout and typed fields") {
  TempDir dir;
  PartitionLayout l = make_layout(3, kOddModel);
  std::string tag = write_checkpoint(dir.path, l, 3);
  Manifest m = read_manifest(tag);
  CHECK(m.zero_stage == 3);
  CHECK(m.world_size == 3);
  CHECK(m.global_steps == 7);
  CHECK(m.optimizer_states == kStates);
  CHECK(m.optimizer_step == 7);
  CHECK(m.storage == Storage::partitions);
  CHECK(m.get<int>("train_batch_size") == 12);
  REQUIRE(m.layout.groups.size() == l.groups.size());
  for (size_t g = 0; g < l.groups.size(); ++g) {
    CHECK(m.layout.groups[g].begin == l.groups[g].begin);
    CHECK(m.layout.groups[g].part == l.groups[g].part);
    CHECK(m.layout.groups[g].part_offset == l.groups[g].part_offset);
    CHECK(m.layout.groups[g].end_layer == l.groups[g].end_layer);
  }
  REQUIRE(m.layout.params.size() == l.params.size());
  for (size_t p = 0; p < l.params.size(); ++p) {
    CHECK(m.layout.params[p].name == l.params[p].name);
    CHECK(m.layout.params[p].offset == l.params[p].offset);
    CHECK(m.layout.params[p].shape == l.params[p].shape);
  }
  CHECK_THROWS_WITH(m.get<int>("lr_scheduler.type"), Catch::Contains("has no 'lr_scheduler.type'"));
  CHECK_THROWS_WITH(m.get<int>("files.storage"), Catch::Contains("'files.storage' has the wrong type"));
}

TEST_CASE("partitioned and by-name checkpoints read every parameter and state exactly") {
  for (int parts : {1, 2, 3, 4}) {
    DYNAMIC_SECTION("stage 2 over " << parts << " ranks") {
      TempDir dir;
      PartitionLayout l = make_layout(parts, kOddModel);
      Manifest m = read_manifest(write_checkpoint(dir.path, l, 2));
      auto src = open_source(m);
      check_reads(*src, l);
      CHECK(src->has("exp_avg"));
      CHECK_FALSE(src->has("momentum_buffer"));
    }
  }
  SECTION("stage 0, by name") {
    TempDir dir;
    PartitionLayout l = make_layout(1, {{1003, 7, 4097, 33, 1, 4097, 33, 1, 517}});
    Manifest m = read_manifest(write_checkpoint(dir.path, l, 0));
    REQUIRE(m.storage == Storage::by_name);
    auto src = open_source(m);
    check_reads(*src, l);
  }
}

TEST_CASE("resharding: a 4-rank checkpoint read into the partitions of a 3-rank layer-per-group layout") {
  TempDir dir;
  PartitionLayout saved = make_layout(4, {{1003, 7, 4097, 33, 1}, {4097, 33, 1, 517}});  // stage 1/2-like groups
  PartitionLayout now = make_layout(3, kOddModel);                                       // stage 3: a group per layer
  auto src = open_source(read_manifest(write_checkpoint(dir.path, saved, 2)));
  for (int r = 0; r < 3; ++r) {
    // What the engine's load does: every owned fragment, read by parameter from the source.
    std::vector<float> mine(static_cast<size_t>(now.part_total), 0.0f);
    for (size_t p = 0; p < now.params.size(); ++p)
      for (const Fragment& f : owned_fragments(now, p, r))
        src->read(static_cast<size_t>(src->find(now.params[p].name)), "exp_avg_sq", f.param_first, f.count,
                  mine.data() + f.part_at);
    // Every element of the new partitions: the formula for parameters, untouched (0) padding.
    for (const GroupDesc& g : now.groups)
      for (int64_t i = 0; i < g.part; ++i) {
        auto [p, k] = param_at(now, g.begin + r * g.part + i);
        float want = p >= 0 ? value(static_cast<size_t>(p), k, "exp_avg_sq") : 0.0f;
        REQUIRE(mine[static_cast<size_t>(g.part_offset + i)] == want);
      }
  }
}

TEST_CASE("zero-to-fp32 writes every parameter by name from a save dir or a tag dir") {
  for (int stage : {0, 1, 3}) {
    DYNAMIC_SECTION("stage " << stage) {
      TempDir dir;
      PartitionLayout l = stage == 0 ? make_layout(1, {{1003, 7}, {4097, 33, 1}}) : make_layout(3, kOddModel);
      std::string tag = write_checkpoint(dir.path, l, stage);
      std::vector<ConsolidateProgress> seen;
      ConsolidateResult r =
          zero_to_fp32(dir.path, dir.path + "/a.safetensors", [&](const ConsolidateProgress& p) { seen.push_back(p); });
      zero_to_fp32(tag, dir.path + "/b.safetensors");
      zero_to_fp32(tag, dir.path + "/m.safetensors", {}, "exp_avg");
      CHECK_THROWS_WITH(zero_to_fp32(tag, dir.path + "/x.safetensors", {}, "momentum_buffer"),
                        Catch::Contains("no 'momentum_buffer'") && Catch::Contains("[exp_avg, exp_avg_sq]"));
      CHECK(r.tag_dir == tag);
      CHECK(r.zero_stage == stage);
      CHECK(r.tensors == l.params.size());
      REQUIRE(seen.size() == l.params.size());
      CHECK(seen.back().bytes_done == seen.back().bytes_total);
      CHECK_FALSE(fs::exists(dir.path + "/a.safetensors.partial"));
      for (const char* name : {"a.safetensors", "b.safetensors", "m.safetensors"}) {
        const std::string what = name[0] == 'm' ? "exp_avg" : kMasterWeights;
        SafetensorsFile out(dir.path + "/" + name);
        CHECK(out.metadata().at("tensor") == what);
        CHECK(out.metadata().at("global_steps") == "7");
        CHECK(out.metadata().at("zero_stage") == std::to_string(stage));
        REQUIRE(out.tensors().size() == l.params.size());
        for (size_t p = 0; p < l.params.size(); ++p) {
          const TensorInfo* t = out.find(l.params[p].name);
          REQUIRE(t);
          CHECK(t->shape == l.params[p].shape);
          std::vector<float> v(static_cast<size_t>(t->numel));
          out.read(t->name, 0, t->numel, v.data(), DType::f32);
          for (int64_t k = 0; k < t->numel; ++k) REQUIRE(v[static_cast<size_t>(k)] == value(p, k, what));
        }
      }
    }
  }
}

TEST_CASE("inconsistent checkpoints are refused naming the file and what is wrong") {
  TempDir dir;
  PartitionLayout l = make_layout(2, kOddModel);
  std::string tag = write_checkpoint(dir.path, l, 2);
  std::string r1 = tag + "/" + rank_file_name(1);

  // Replaces rank 1's file with one holding only zero master weights, stamped with `step`.
  auto rewrite_rank1 = [&](const char* step) {
    write_safetensors(r1,
                      {{"fp32",
                        DType::f32,
                        {l.part_total},
                        nullptr,
                        [](int64_t, int64_t n, void* d) { std::fill_n(static_cast<float*>(d), n, 0.0f); }}},
                      {{"rank", "1"}, {"world_size", "2"}, {"global_steps", step}});
  };

  SECTION("a rank file from another save") {
    rewrite_rank1("9");
    auto src = open_source(read_manifest(tag));
    std::vector<float> v(1003);
    CHECK_THROWS_WITH(src->read(0, kMasterWeights, 0, 1003, v.data()),
                      Catch::Contains(r1) && Catch::Contains("'global_steps' is '9', the manifest expects 7"));
  }
  SECTION("a rank file without an optimizer state") {
    rewrite_rank1("7");
    auto src = open_source(read_manifest(tag));
    std::vector<float> v(1003);
    CHECK_THROWS_WITH(src->read(0, kMasterWeights, 0, 1003, v.data()),
                      Catch::Contains(r1) && Catch::Contains("tensor 'exp_avg' is missing"));
  }
  SECTION("a missing rank file") {
    fs::remove(r1);
    auto src = open_source(read_manifest(tag));
    std::vector<float> v(1003);
    CHECK_THROWS_WITH(src->read(0, kMasterWeights, 0, 1003, v.data()), Catch::Contains("cannot open " + r1));
    CHECK_THROWS_WITH(zero_to_fp32(tag, dir.path + "/x.safetensors"), Catch::Contains("cannot open " + r1));
    CHECK_FALSE(fs::exists(dir.path + "/x.safetensors"));
    CHECK_FALSE(fs::exists(dir.path + "/x.safetensors.partial"));
  }
  SECTION("manifest problems") {
    Manifest m = manifest_for(l, 2, Storage::partitions);
    nlohmann::json j = manifest_json(m);
    j["layout"]["groups"][2].erase("part");
    std::ofstream(tag + "/" + kManifestFile) << j.dump();
    CHECK_THROWS_WITH(read_manifest(tag), Catch::Contains("layout.groups[2] has no 'part'"));
    j = manifest_json(m);
    j["layout"]["groups"][2]["part"] = 1;
    std::ofstream(tag + "/" + kManifestFile) << j.dump();
    CHECK_THROWS_WITH(read_manifest(tag), Catch::Contains("partition group 2"));
    j = manifest_json(m);
    j["format_version"] = 1;
    std::ofstream(tag + "/" + kManifestFile) << j.dump();
    CHECK_THROWS_WITH(read_manifest(tag), Catch::Contains("written by an older dscpp"));
    j = manifest_json(m);
    j["files"]["names"] = {"zero_pp_rank_0_partitions.safetensors"};
    std::ofstream(tag + "/" + kManifestFile) << j.dump();
    CHECK_THROWS_WITH(read_manifest(tag), Catch::Contains("1 partition files listed for 2 ranks"));
    j = manifest_json(m);
    j["files"]["names"] = {"../../etc/passwd", "x"};
    std::ofstream(tag + "/" + kManifestFile) << j.dump();
    CHECK_THROWS_WITH(read_manifest(tag), Catch::Contains("is not a plain name"));
  }
  SECTION("neither a tag dir nor a save dir") {
    fs::create_directory(dir.path + "/empty");
    CHECK_THROWS_WITH(resolve_tag_dir(dir.path + "/empty"),
                      Catch::Contains("neither a tag directory (no manifest.json) nor a save directory"));
    CHECK_THROWS_WITH(resolve_tag_dir(dir.path + "/absent"), Catch::Contains("no such directory"));
  }
}

TEST_CASE("a plain safetensors file by name: any float dtype reads as fp32, optimizer states are absent") {
  TempDir dir;
  std::vector<uint16_t> half = {0x3c00, 0xc000, 0x3800};  // fp16 1, -2, 0.5
  write_safetensors(dir.path + "/w.safetensors", {{"a.weight", DType::f16, {3}, half.data(), {}}});
  NamedTensorSource src(dir.path + "/w.safetensors");
  REQUIRE(src.find("a.weight") == 0);
  std::vector<float> v(3);
  src.read(0, kMasterWeights, 0, 3, v.data());
  CHECK(v == std::vector<float>{1.0f, -2.0f, 0.5f});
  CHECK_FALSE(src.has("exp_avg"));
  CHECK_THROWS_WITH(src.read(0, "exp_avg", 0, 3, v.data()), Catch::Contains("holds weights only"));
}
