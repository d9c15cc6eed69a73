// Frozen parameters and LoRA adapters in checkpoints: zero-to-fp32 and export-hf read the frozen
// ones from frozen.safetensors (digest-checked), export-hf --adapter writes PEFT's adapter
// directory and --merge folds each pair into its base weight, checked against B·A computed
// naively. The checkpoint is a stage-0 one written here with the library's own writers: trained
// parameters (two LoRA pairs and a trained base) in the manifest's layout, frozen ones (a
// transposed Conv1D base and a tied embedding) in bf16 in frozen.safetensors.
#include "checkpoint/checksums.h"
#include "checkpoint/export_hf.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/lora.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/zero_to_fp32.h"
#include "core/error.h"
#include "tests/unit/layout_fixture.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace dscpp;
using namespace dscpp::ckpt;
using namespace dscpp::ckpt::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_lora_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;  // memory's [rows, cols]
};

// Trained: a Llama-like q_proj whose base trains too, and the LoRA matrices of it and of a GPT-2
// Conv1D. Frozen: the Conv1D base (the files hold it as [in, out]) and a tied embedding.
const std::vector<Param> kTrained = {{"q.weight", {4, 3}},
                                     {"q.lora_A.weight", {2, 3}},
                                     {"q.lora_B.weight", {4, 2}},
                                     {"c_attn.lora_A.weight", {2, 5}},
                                     {"c_attn.lora_B.weight", {6, 2}}};
const std::vector<Param> kFrozen = {{"c_attn.weight", {6, 5}}, {"wte.weight", {7, 3}}};
const std::vector<std::string> kAdapters = {"q.lora_A.weight", "q.lora_B.weight", "c_attn.lora_A.weight",
                                            "c_attn.lora_B.weight"};
constexpr const char* kTransposed = "c_attn.weight";
constexpr const char* kAlias = "lm_head.weight";  // wte.weight's other name
constexpr int64_t kR = 2;
constexpr double kAlpha = 16;

int64_t numel(const std::vector<int64_t>& shape) {
  return shape[0] * shape[1];
}

// Element k (memory's layout) of the parameter named `name`: multiples of 1/4 below 8, exact
// in bf16, so frozen values survive their file and B·A is exact in fp32.
float value(const std::string& name, int64_t k) {
  const float seed = static_cast<float>(name.size() % 7);
  return seed * 0.5f + static_cast<float>((k * 5) % 13) * 0.25f - 2.0f;
}

std::vector<float> values(const Param& p) {
  std::vector<float> v(static_cast<size_t>(numel(p.shape)));
  for (size_t k = 0; k < v.size(); ++k) v[k] = value(p.name, static_cast<int64_t>(k));
  return v;
}

// `p`'s values as a file holds them: [cols, rows] when transposed.
std::vector<float> file_values(const Param& p, bool transposed) {
  std::vector<float> mem = values(p);
  if (!transposed) return mem;
  std::vector<float> t(mem.size());
  const int64_t rows = p.shape[0], cols = p.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = mem[static_cast<size_t>(r * cols + c)];
  return t;
}

std::vector<float> read_all(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  REQUIRE(t != nullptr);
  std::vector<float> v(static_cast<size_t>(t->numel));
  f.read(name, 0, t->numel, v.data(), DType::f32);
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string adapter_config(bool rslora, const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::ordered_json c = {{"peft_type", "LORA"},
                              {"base_model_name_or_path", "gpt2"},
                              {"r", kR},
                              {"lora_alpha", kAlpha},
                              {"use_rslora", rslora},
                              {"target_modules", {"q", "c_attn"}},
                              {"fan_in_fan_out", true},
                              {"rank_pattern", nlohmann::json::object()},
                              {"alpha_pattern", nlohmann::json::object()}};
  for (const auto& [k, v] : extra.items()) c[k] = v;
  return c.dump(2) + "\n";
}

// Writes a stage-0 tag directory <dir>/global_step3 as the runtime saves one with frozen
// parameters and an adapter; `config` is its adapter_config.json ("" = no adapter at all).
std::string write_checkpoint(const std::string& dir, const std::string& config) {
  const std::string tag = dir + "/global_step3";
  fs::create_directories(tag);
  std::vector<int64_t> sizes;
  for (const Param& p : kTrained) sizes.push_back(numel(p.shape));
  Manifest m;
  m.layout = make_layout(1, {sizes});
  for (size_t i = 0; i < kTrained.size(); ++i) {
    m.layout.params[i].name = kTrained[i].name;
    m.layout.params[i].shape = kTrained[i].shape;
  }
  m.global_steps = m.optimizer_step = 3;
  m.optimizer_type = "adamw";
  m.optimizer_states = {"exp_avg"};
  m.params_dtype = "bf16";
  m.files = {kModelFile, kOptimizerFile};
  const std::map<std::string, std::string> hf{{kLayoutKey, kHfLayout}};
  std::vector<std::vector<float>> held;  // keeps the tensors' data alive until written
  held.reserve(kTrained.size());
  std::vector<TensorToWrite> model, optim, frozen;
  for (const Param& p : kTrained) {
    held.push_back(values(p));
    model.push_back({p.name, DType::f32, p.shape, held.back().data(), {}});
    optim.push_back({p.name + "/exp_avg", DType::f32, p.shape, held.back().data(), {}});
  }
  // Frozen: bf16 by name in Hugging Face's layout, the tied one under both names.
  std::vector<std::vector<uint16_t>> half;
  half.reserve(kFrozen.size());
  for (const Param& p : kFrozen) {
    const bool transposed = p.name == kTransposed;
    const std::vector<float> f = file_values(p, transposed);
    half.emplace_back(f.size());
    convert(f.data(), DType::f32, half.back().data(), DType::bf16, f.size());
    const std::vector<int64_t> shape = transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
    frozen.push_back({p.name, DType::bf16, shape, half.back().data(), {}});
    if (p.name == "wte.weight") frozen.push_back({kAlias, DType::bf16, shape, half.back().data(), {}});
  }
  m.checksums[kModelFile] = write_safetensors(tag + "/" + kModelFile, model, hf);
  m.checksums[kOptimizerFile] = write_safetensors(tag + "/" + kOptimizerFile, optim, hf);
  m.checksums[kFrozenFile] = write_safetensors(tag + "/" + kFrozenFile, frozen, hf);
  const std::string hf_config = R"({"model_type": "gpt2"})";
  std::ofstream(tag + "/" + kExportConfigFile) << hf_config;
  m.doc = {{"export_config", kExportConfigFile},
           {"export_config_sha256", sha256_hex(hf_config)},
           {"file_transposed", {kTransposed}},
           {"tied", {{kAlias, "wte.weight"}}},
           {"frozen", {{"file", kFrozenFile}, {"dtype", "bf16"}, {"params", {"c_attn.weight", "wte.weight"}}}}};
  if (!config.empty()) {
    std::ofstream(tag + "/" + kAdapterConfigFile) << config;
    m.doc["adapter_params"] = kAdapters;
    m.doc["adapter_config"] = kAdapterConfigFile;
    m.doc["adapter_config_sha256"] = sha256_hex(config);
  }
  std::ofstream(tag + "/" + kManifestFile) << manifest_json(m).dump(2);
  return tag;
}

const Param& param(const std::string& name) {
  for (const auto* list : {&kTrained, &kFrozen})
    for (const Param& p : *list)
      if (p.name == name) return p;
  FAIL("no parameter " << name);
  return kTrained.front();
}

// W + scale · B·A, naively in double, in memory's layout.
std::vector<double> merged(const std::string& module, double scale) {
  const Param &w = param(module + ".weight"), &a = param(module + ".lora_A.weight"),
              &b = param(module + ".lora_B.weight");
  const std::vector<float> wv = values(w), av = values(a), bv = values(b);
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<double> m(wv.begin(), wv.end());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < in; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < kR; ++k)
        sum += double{bv[static_cast<size_t>(o * kR + k)]} * av[static_cast<size_t>(k * in + j)];
      m[static_cast<size_t>(o * in + j)] += scale * sum;
    }
  return m;
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(-1, std::ios::end);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("zero-to-fp32 includes the frozen parameters, widened to fp32, in Hugging Face's layout", "[lora]") {
  TempDir dir;
  const std::string tag = write_checkpoint(dir.path, adapter_config(false));
  const ConsolidateResult r = zero_to_fp32(tag, dir.path + "/all.safetensors");
  CHECK(r.verified);
  CHECK(r.tensors == kTrained.size() + kFrozen.size() + 1);  // + the tied alias
  CHECK(r.frozen == kFrozen.size() + 1);
  SafetensorsFile out(dir.path + "/all.safetensors");
  CHECK(out.tensors().size() == r.tensors);
  for (const Param& p : kTrained) CHECK(read_all(out, p.name) == values(p));
  for (const Param& p : kFrozen) {
    const bool transposed = p.name == kTransposed;
    REQUIRE(out.find(p.name) != nullptr);
    CHECK(out.find(p.name)->dtype == DType::f32);
    CHECK(out.find(p.name)->shape == (transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape));
    CHECK(read_all(out, p.name) == file_values(p, transposed));
  }
  CHECK(read_all(out, kAlias) == values(param("wte.weight")));

  // An optimizer state: frozen parameters have none.
  const ConsolidateResult s = zero_to_fp32(tag, dir.path + "/m.safetensors", {}, "exp_avg");
  CHECK(s.tensors == kTrained.size());
  CHECK(s.frozen == 0);
  SafetensorsFile m(dir.path + "/m.safetensors");
  CHECK(m.tensors().size() == kTrained.size());
  CHECK(m.find("c_attn.weight") == nullptr);
}

TEST_CASE("export-hf writes the frozen parameters too, and the adapter matrices by their names", "[lora]") {
  TempDir dir;
  const std::string tag = write_checkpoint(dir.path, adapter_config(false));
  std::vector<ConsolidateProgress> seen;
  ExportOptions o;
  const ExportResult r = export_hf(tag, dir.path + "/hf", o, [&](const ConsolidateProgress& p) { seen.push_back(p); });
  CHECK(r.files == std::vector<std::string>{"model.safetensors", kExportConfigFile});
  CHECK(r.adapters == kAdapters.size());
  CHECK(r.merged == 0);
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().tensors_done == seen.back().tensors_total);
  CHECK(seen.back().bytes_done == seen.back().bytes_total);
  SafetensorsFile out(dir.path + "/hf/model.safetensors");
  CHECK(out.tensors().size() == kTrained.size() + kFrozen.size());  // the tied alias by its owner's name only
  for (const auto* list : {&kTrained, &kFrozen})
    for (const Param& p : *list) CHECK(read_all(out, p.name) == file_values(p, p.name == kTransposed));
}

TEST_CASE("export-hf --adapter writes exactly PEFT's adapter directory", "[lora]") {
  TempDir dir;
  const std::string config = adapter_config(false);
  const std::string tag = write_checkpoint(dir.path, config);
  ExportOptions o;
  o.kind = ExportKind::adapter;
  const ExportResult r = export_hf(tag, dir.path + "/adapter", o);
  CHECK(r.files == std::vector<std::string>{kAdapterWeightsFile, kAdapterConfigFile});
  std::set<std::string> listed;
  for (const auto& e : fs::directory_iterator(dir.path + "/adapter")) listed.insert(e.path().filename().string());
  CHECK(listed == std::set<std::string>{kAdapterWeightsFile, kAdapterConfigFile});
  CHECK(slurp(dir.path + "/adapter/" + kAdapterConfigFile) == config);  // byte for byte
  SafetensorsFile out(dir.path + "/adapter/" + kAdapterWeightsFile);
  CHECK(out.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(out.tensors().size() == kAdapters.size());
  for (const std::string& name : kAdapters) {
    const TensorInfo* t = out.find(std::string(kPeftPrefix) + name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == DType::f32);
    CHECK(t->shape == param(name).shape);
    CHECK(read_all(out, t->name) == values(param(name)));
  }

  SECTION("--base and --dtype") {
    o.base_model = "meta-llama/Llama-3.2-1B";
    o.dtype = DType::bf16;
    export_hf(tag, dir.path + "/based", o);
    const auto written = nlohmann::ordered_json::parse(slurp(dir.path + "/based/" + kAdapterConfigFile));
    auto want = nlohmann::ordered_json::parse(config);
    want["base_model_name_or_path"] = o.base_model;
    CHECK(written == want);
    SafetensorsFile b(dir.path + "/based/" + kAdapterWeightsFile);
    CHECK(b.find(std::string(kPeftPrefix) + kAdapters[0])->dtype == DType::bf16);
  }
  SECTION("--config and --base where they mean nothing") {
    o.config = dir.path + "/x.json";
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", o), Catch::Contains("an adapter directory has none"));
    o = ExportOptions{};
    o.base_model = "gpt2";
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", o), Catch::Contains("--base"));
  }
}

TEST_CASE("export-hf --merge folds each LoRA pair into its base weight as PEFT's merge_and_unload", "[lora]") {
  for (bool rslora : {false, true}) {
    DYNAMIC_SECTION((rslora ? "use_rslora: lora_alpha / sqrt(r)" : "lora_alpha / r")) {
      TempDir dir;
      const std::string tag = write_checkpoint(dir.path, adapter_config(rslora));
      const double scale = rslora ? kAlpha / std::sqrt(double{kR}) : kAlpha / kR;
      ExportOptions o;
      o.kind = ExportKind::merged;
      std::vector<ConsolidateProgress> seen;
      const ExportResult r =
          export_hf(tag, dir.path + "/merged", o, [&](const ConsolidateProgress& p) { seen.push_back(p); });
      CHECK(r.merged == 2);
      CHECK(r.read.tensors == 3);
      REQUIRE(seen.size() == 3);  // the adapter matrices are read, not written: not counted
      CHECK(seen.back().tensors_total == 3);
      CHECK(seen.back().bytes_done == seen.back().bytes_total);
      SafetensorsFile out(dir.path + "/merged/model.safetensors");
      CHECK(out.tensors().size() == 3);  // q.weight (trained), c_attn.weight and wte.weight (frozen)
      for (const std::string& name : kAdapters) CHECK(out.find(name) == nullptr);
      CHECK(read_all(out, "wte.weight") == values(param("wte.weight")));

      const std::vector<double> q = merged("q", scale);
      const std::vector<float> qv = read_all(out, "q.weight");
      REQUIRE(qv.size() == q.size());
      for (size_t e = 0; e < q.size(); ++e) CHECK(qv[e] == Approx(q[e]).epsilon(1e-6).margin(1e-3));
      // A Conv1D: the file holds Wᵀ, so the merge adds (B·A)ᵀ.
      const std::vector<double> c = merged("c_attn", scale);
      const TensorInfo* ct = out.find(kTransposed);
      REQUIRE(ct != nullptr);
      CHECK(ct->shape == std::vector<int64_t>{5, 6});
      const std::vector<float> cv = read_all(out, kTransposed);
      for (int64_t o2 = 0; o2 < 6; ++o2)
        for (int64_t j = 0; j < 5; ++j)
          CHECK(cv[static_cast<size_t>(j * 6 + o2)] ==
                Approx(c[static_cast<size_t>(o2 * 5 + j)]).epsilon(1e-6).margin(1e-3));

      if (!rslora) {  // every value is exact in fp32 here: bf16 output is the fp32 merge rounded once
        o.dtype = DType::bf16;
        export_hf(tag, dir.path + "/bf16", o);
        SafetensorsFile b(dir.path + "/bf16/model.safetensors");
        std::vector<float> exact(q.begin(), q.end()), rounded(q.size());
        std::vector<uint16_t> half(q.size());
        convert(exact.data(), DType::f32, half.data(), DType::bf16, q.size());
        convert(half.data(), DType::bf16, rounded.data(), DType::f32, q.size());
        CHECK(read_all(b, "q.weight") == rounded);
      }
    }
  }
}

TEST_CASE("what cannot be merged or exported is refused, naming why", "[lora]") {
  TempDir dir;
  SECTION("a damaged frozen file") {
    const std::string tag = write_checkpoint(dir.path, adapter_config(false));
    flip_last_byte(tag + "/" + kFrozenFile);
    CHECK_THROWS_WITH(zero_to_fp32(tag, dir.path + "/x.safetensors"),
                      Catch::Contains("is damaged") && Catch::Contains(kFrozenFile));
    CHECK_FALSE(fs::exists(dir.path + "/x.safetensors"));
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", ExportOptions{}), Catch::Contains(kFrozenFile));
    ExportOptions merge;
    merge.kind = ExportKind::merged;
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", merge), Catch::Contains(kFrozenFile));
    CHECK_FALSE(fs::exists(dir.path + "/x"));
    // An optimizer state and an adapter never read it.
    CHECK_NOTHROW(zero_to_fp32(tag, dir.path + "/m.safetensors", {}, "exp_avg"));
    ExportOptions adapter;
    adapter.kind = ExportKind::adapter;
    CHECK_NOTHROW(export_hf(tag, dir.path + "/adapter", adapter));
  }
  SECTION("no adapter") {
    const std::string tag = write_checkpoint(dir.path, "");
    for (ExportKind kind : {ExportKind::adapter, ExportKind::merged}) {
      ExportOptions o;
      o.kind = kind;
      CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", o), Catch::Contains("has no adapter parameters"));
    }
    CHECK_FALSE(fs::exists(dir.path + "/x"));
    CHECK_NOTHROW(export_hf(tag, dir.path + "/hf", ExportOptions{}));
  }
  SECTION("a changed adapter_config.json") {
    const std::string tag = write_checkpoint(dir.path, adapter_config(false));
    std::ofstream(tag + "/" + kAdapterConfigFile) << adapter_config(true);
    ExportOptions o;
    o.kind = ExportKind::adapter;
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", o),
                      Catch::Contains(kAdapterConfigFile) && Catch::Contains("does not match the digest"));
  }
  SECTION("per-module ranks") {
    const std::string tag = write_checkpoint(dir.path, adapter_config(false, {{"rank_pattern", {{"q", 4}}}}));
    ExportOptions o;
    o.kind = ExportKind::merged;
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", o), Catch::Contains("rank_pattern"));
    o.kind = ExportKind::adapter;  // PEFT reads rank_pattern itself
    CHECK_NOTHROW(export_hf(tag, dir.path + "/adapter", o));
  }
  SECTION("an r that is not the matrices'") {
    const std::string tag = write_checkpoint(dir.path, adapter_config(false, {{"r", 4}}));
    ExportOptions o;
    o.kind = ExportKind::merged;
    CHECK_THROWS_WITH(export_hf(tag, dir.path + "/x", o),
                      Catch::Contains("LoRA pair of 'q.weight' does not fit") && Catch::Contains("r = 4"));
  }
}

TEST_CASE("PEFT's scaling and the merge arithmetic", "[lora]") {
  CHECK(lora_scaling({{"r", 8}, {"lora_alpha", 32}}, "c").scale == 4.0f);
  CHECK(lora_scaling({{"r", 16}, {"lora_alpha", 32}, {"use_rslora", true}}, "c").scale == 8.0f);
  CHECK_THROWS_WITH(lora_scaling({{"r", 8}}, "c.json"), Catch::Contains("c.json: \"lora_alpha\" must be"));
  CHECK_THROWS_WITH(lora_scaling({{"r", 8}, {"lora_alpha", 8}, {"use_dora", true}}, "c"), Catch::Contains("DoRA"));
  CHECK_THROWS_WITH(lora_scaling({{"r", 8}, {"lora_alpha", 8}, {"alpha_pattern", {{"q", 2}}}}, "c"),
                    Catch::Contains("alpha_pattern"));
  CHECK_THROWS_WITH(lora_scaling({{"peft_type", "IA3"}, {"r", 8}, {"lora_alpha", 8}}, "c"), Catch::Contains("IA3"));
  // [[1, 2], [3, 4]] += 0.5 · [[1], [2]] · [[10, 20]]
  std::vector<float> w = {1, 2, 3, 4};
  const std::vector<float> a = {10, 20}, b = {1, 2};
  merge_lora(w.data(), a.data(), b.data(), 2, 2, 1, 0.5f);
  CHECK(w == std::vector<float>{6, 12, 13, 24});
}
