// torch.save's files (checkpoint/torch_file.h) and WeightFiles over them, on the files
// tests/data/torch_bin/make.py wrote with torch 1.13: every float tensor equals what the script
// wrote beside it as float32 safetensors, views and shared storages included; malicious pickles
// are refused by name; damaged copies fail with a dscpp::Error, never worse.
#include "build_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/torch_file.h"
#include "checkpoint/torch_pickle.h"
#include "checkpoint/weight_files.h"
#include "core/error.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using dscpp::Error;
using dscpp::ckpt::SafetensorsFile;
using dscpp::ckpt::TorchFile;
using dscpp::ckpt::WeightFiles;
using namespace std::string_literals;

namespace {

const std::string kData = (fs::path(DSCPP_SOURCE_ROOT) / "tests" / "data" / "torch_bin").string();

std::vector<float> expected(const SafetensorsFile& f, const std::string& name) {
  const auto* t = f.find(name);
  REQUIRE(t);
  std::vector<float> v(static_cast<size_t>(t->numel));
  f.read(name, 0, t->numel, v.data(), dscpp::DType::f32);
  return v;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("torch.save's zip, ZIP64 and legacy formats read every float tensor as written") {
  const SafetensorsFile want(kData + "/expected.safetensors");
  for (const char* file : {"state_dict.bin", "state_dict_zip64.bin", "state_dict_legacy.bin"}) {
    INFO(file);
    TorchFile f(kData + "/" + file);
    CHECK(std::string(f.format()) == (std::string(file) == "state_dict_legacy.bin" ? "legacy" : "zip"));
    CHECK(f.tensors().size() == want.tensors().size() + 2);  // and the int64 and bool tensors
    for (const auto& info : want.tensors()) {
      INFO(info.name);
      const TorchFile::Tensor* t = f.find(info.name);
      REQUIRE(t);
      CHECK(t->shape == info.shape);
      const std::vector<float> v = expected(want, info.name);
      std::vector<float> got(v.size(), -1.0f);
      f.read(info.name, 0, t->numel, got.data());
      CHECK(std::memcmp(got.data(), v.data(), v.size() * sizeof(float)) == 0);
      // Every slice, so a strided read starting anywhere in a view finds its place.
      for (int64_t first = 0; first < t->numel; ++first)
        for (int64_t count = 1; first + count <= t->numel; ++count) {
          std::vector<float> part(static_cast<size_t>(count));
          f.read(info.name, first, count, part.data());
          REQUIRE(std::memcmp(part.data(), v.data() + first, part.size() * sizeof(float)) == 0);
        }
    }
    CHECK(f.find("half")->type.name == "torch.float16");
    CHECK(f.find("bf16")->type.name == "torch.bfloat16");
    CHECK(f.find("double")->type.name == "torch.float64");
    CHECK(f.find("scalar")->shape.empty());
    CHECK(f.find("view")->offset == 3);
    CHECK(f.find("shared.second")->offset == 8);
    CHECK(f.find("shared.second")->data == f.find("shared.first")->data);  // one storage
    CHECK(f.find("head.weight")->data == f.find("emb.weight")->data);      // tied: saved once
    CHECK_FALSE(f.find("transposed")->contiguous);
    CHECK(f.find("transposed")->stride == std::vector<int64_t>{1, 5});
    CHECK_FALSE(f.find("permuted")->contiguous);
    CHECK(f.find("permuted")->offset == 6);
    CHECK(f.find("lin.weight")->contiguous);
    // Integer and bool tensors are listed but are not weights.
    CHECK(f.find("steps")->shape == std::vector<int64_t>{3});
    float out[3];
    const std::string e = error_of([&] { f.read("steps", 0, 3, out); });
    CHECK_THAT(e,
               Catch::Contains(file) && Catch::Contains("'steps' is torch.int64") && Catch::Contains("float tensors"));
    CHECK_THAT(error_of([&] { f.read("mask", 0, 2, out); }), Catch::Contains("'mask' is torch.bool"));
    CHECK_THAT(error_of([&] { f.read("view", 4, 2, out); }), Catch::Contains("outside tensor 'view'"));
    CHECK_THAT(error_of([&] { f.read("nope", 0, 1, out); }), Catch::Contains("no tensor named 'nope'"));
  }
}

TEST_CASE("WeightFiles reads torch.save files: tied names of one storage, transposed matrices") {
  const SafetensorsFile want(kData + "/expected.safetensors");
  // The tied embedding is in the file under both names (one storage): equal, so accepted.
  WeightFiles w(kData + "/state_dict.bin", {"lin.weight"}, {{"head.weight", "emb.weight"}});
  REQUIRE(w.files() == std::vector<std::string>{kData + "/state_dict.bin"});
  const int64_t lin = w.find("lin.weight");
  REQUIRE(lin >= 0);
  CHECK(w.params()[static_cast<size_t>(lin)].shape == std::vector<int64_t>{3, 4});  // memory's [rows, cols]
  std::vector<float> got(12);
  w.read(static_cast<size_t>(lin), dscpp::ckpt::kMasterWeights, 0, 12, got.data());
  const std::vector<float> file = expected(want, "lin.weight");  // [4, 3]
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) CHECK(got[static_cast<size_t>(r * 4 + c)] == file[static_cast<size_t>(c * 3 + r)]);
  const int64_t head = w.find("head.weight");
  REQUIRE(head >= 0);
  std::vector<float> h(15);
  w.read(static_cast<size_t>(head), dscpp::ckpt::kMasterWeights, 0, 15, h.data());
  CHECK(h == expected(want, "emb.weight"));
  // A file holding only the other name lists it under the owner's.
  WeightFiles alias(kData + "/single/pytorch_model.bin", {}, {{"w", "owner"}});
  CHECK(alias.find("owner") >= 0);
  // Two names of one parameter whose values differ are refused, as in safetensors.
  CHECK_THAT(error_of([&] {
               WeightFiles(kData + "/state_dict.bin", {}, {{"lin.bias", "view"}});
             }),
             Catch::Contains("shape") || Catch::Contains("different values"));
}

TEST_CASE("a sharded pytorch_model.bin.index.json and weight directories of torch files") {
  const SafetensorsFile want(kData + "/sharded/expected.safetensors");
  for (const std::string& path : {kData + "/sharded/pytorch_model.bin.index.json", kData + "/sharded"}) {
    INFO(path);
    WeightFiles w(path);
    CHECK(w.files() == std::vector<std::string>{kData + "/sharded/pytorch_model-00001-of-00002.bin",
                                                kData + "/sharded/pytorch_model-00002-of-00002.bin"});
    REQUIRE(w.params().size() == 3);
    for (const auto& info : want.tensors()) {
      const int64_t i = w.find(info.name);
      REQUIRE(i >= 0);
      CHECK(w.params()[static_cast<size_t>(i)].shape == info.shape);
      std::vector<float> got(static_cast<size_t>(info.numel));
      w.read(static_cast<size_t>(i), dscpp::ckpt::kMasterWeights, 0, info.numel, got.data());
      CHECK(got == expected(want, info.name));
    }
  }
  WeightFiles single(kData + "/single");
  CHECK(single.files() == std::vector<std::string>{kData + "/single/pytorch_model.bin"});
  std::vector<float> w(6);
  single.read(0, dscpp::ckpt::kMasterWeights, 0, 6, w.data());
  CHECK(w == std::vector<float>{0, 1, 2, 3, 4, 5});
  // Both formats: safetensors is read, as transformers prefers it.
  WeightFiles both(kData + "/both");
  CHECK(both.files() == std::vector<std::string>{kData + "/both/model.safetensors"});
  std::vector<float> b(2);
  both.read(0, dscpp::ckpt::kMasterWeights, 0, 2, b.data());
  CHECK(b == std::vector<float>{1, 1});
  CHECK_THAT(error_of([&] { WeightFiles(kData + "/evil"); }), Catch::Contains("pytorch_model.bin.index.json"));
}

TEST_CASE("malicious and inconsistent pickles are refused by name, before anything runs") {
  const std::string evil = kData + "/evil/";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"os_system.bin", "global 'os.system'"},
      {"builtins_eval.bin", "global 'builtins.eval'"},
      {"getattr_legacy.bin", "global '__builtin__.getattr'"},
      {"reduce_storage.bin", "REDUCE calls torch.FloatStorage"},
      {"newobj.bin", "opcode NEWOBJ builds an object of a class"},
      {"offset_out_of_range.bin",
       "tensor 'w' (offset 2, size [3], stride [1]) reaches element 4 of storage '0', "
       "which holds 4 elements"},
      {"stride_out_of_range.bin", "reaches element 4 of storage '0'"},
      {"missing_storage.bin", "refers to storage '1', but the archive has no entry"},
  };
  for (const auto& [file, message] : cases) {
    INFO(file);
    const std::string e = error_of([&] { TorchFile f(evil + file); });
    CHECK_THAT(e, Catch::Contains(evil + file) && Catch::Contains(message));
    // WeightFiles tells the format by the first bytes, whatever the name.
    CHECK_THAT(error_of([&] { WeightFiles w(evil + file); }), Catch::Contains(message));
  }
  CHECK_THAT(error_of([&] { TorchFile f(evil + "os_system.bin"); }), Catch::Contains("runs no code"));
}

TEST_CASE("the unpickler: a state dict by hand; cycles, deep nesting and bad opcodes fail cleanly") {
  auto unpickle = [](const std::string& body) {
    const std::string pickle = "\x80\x02"s + body;
    dscpp::ckpt::BytesInput in(pickle, "test.pkl");
    return dscpp::ckpt::unpickle_state_dict(in, "test.pkl");
  };
  // {'w': _rebuild_tensor_v2(('storage', HalfStorage, '0', 'cpu', 4), 1, (2,), (1,), False, OrderedDict())}
  // and a second 'w' that wins, as in a Python dict.
  const std::string tensor =
      "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00"
      "storagectorch\nHalfStorage\nX\x01\x00\x00\x00"
      "0"
      "X\x03\x00\x00\x00"
      "cpuK\x04tQK\x01K\x02\x85K\x01\x85\x89"
      "ccollections\nOrderedDict\n)RtR"s;
  const auto d = unpickle("}(X\x01\x00\x00\x00w"s + "K\x07"s + "X\x01\x00\x00\x00w"s + tensor + "u.");
  REQUIRE(d.tensors.size() == 1);
  CHECK(d.tensors[0].name == "w");
  CHECK(d.tensors[0].type.name == "torch.float16");
  CHECK(d.tensors[0].offset == 1);
  CHECK(d.tensors[0].shape == std::vector<int64_t>{2});
  REQUIRE(d.storages.size() == 1);
  CHECK(d.storages[0].key == "0");
  CHECK(d.storages[0].numel == 4);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"]q\x00h\x00"
       "a."s,
       "holds a list, not a state dict"},  // a list holding itself
      {"}q\x00X\x01\x00\x00\x00"
       "ah\x00s."s,
       "holds no tensors (its keys: 'a')"},                                         // a dict holding itself
      {std::string(200000, ']') + std::string(199999, 'a') + ".", "holds a list"},  // nested 200000 deep
      {"h\x05.", "memo entry 5 is read before it is written"},
      {"a.", "an opcode takes 1 item(s), and the stack has 0"},
      {"K\x01(0.", "the stack is empty"},  // POP below a MARK
      {"u.", "there is none"},
      {"X\xff\xff\xff\x7f", "more than the 0 left"},
      {"\xff.", "opcode 0xff is not one torch.save writes"},
      {"I1\n.", "opcode 0x49 ('I')"},
      {"]}b.", "BUILD sets the state of a list"},
      {"X\x01\x00\x00\x00xQ."s, "a persistent id that is not torch's"},
      {"ctorch\nload\n.", "global 'torch.load'"},
      {"ctorch._utils\n_rebuild_tensor_v2\n)R.", "called with 0 arguments"},
      {"K\x01K\x02R.", "REDUCE calls a int value, not a function"},
      {"K\x01", "ends before its STOP"},
  };
  for (const auto& [body, message] : bad) {
    INFO(body.substr(0, 40));
    CHECK_THAT(error_of([&] { unpickle(body); }), Catch::Contains("test.pkl") && Catch::Contains(message));
  }
}

TEST_CASE("damaged torch files fail with a dscpp::Error naming the file: every truncation, random bytes") {
  // In memory where there is a tmpfs: thousands of small files are written.
  const fs::path dir = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  const std::string tmp = (dir / ("dscpp_torch_fuzz_" + std::to_string(::getpid()))).string();
  std::mt19937 rng(1234);
  int opened = 0, refused = 0;
  auto attempt = [&](const std::string& bytes) {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    try {
      TorchFile f(tmp);
      for (const auto& t : f.tensors()) {
        std::vector<float> v(static_cast<size_t>(t.numel));
        if (t.type.dtype) f.read(t.name, 0, t.numel, v.data());
      }
      ++opened;
    } catch (const Error& e) {
      ++refused;
      REQUIRE_THAT(e.what(), Catch::Contains(tmp));
    }
  };
  for (const char* file : {"state_dict.bin", "state_dict_zip64.bin", "state_dict_legacy.bin",
                           "sharded/pytorch_model-00002-of-00002.bin"}) {
    INFO(file);
    const std::string good = bytes_of(kData + "/" + file);
    for (size_t n = 0; n < good.size(); ++n) attempt(good.substr(0, n));
    for (int k = 0; k < 1200; ++k) {
      std::string bad = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      // Half of them where the pickles and the zip directory are, not the tensors' bytes.
      const size_t head = std::min<size_t>(bad.size(), 900), tail = std::min<size_t>(bad.size(), 500);
      for (int i = 0; i < flips; ++i) {
        const size_t at = k % 2 ? rng() % bad.size() : k % 4 ? rng() % head : bad.size() - 1 - rng() % tail;
        bad[at] = static_cast<char>(rng());
      }
      attempt(bad);
    }
  }
  fs::remove(tmp);
  CHECK(refused > 0);
  CHECK(opened > 0);  // flips in tensor data leave a readable file
}
