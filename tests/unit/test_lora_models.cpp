// The families with --lora / --lora_from (models/common/lora_config.h), loaded as the runtime
// loads them: which parameters a model then declares (PEFT's names and shapes, frozen and adapter
// flags, init), the adapter_config.json it asks to be saved against the one PEFT 0.12's
// save_pretrained wrote for the same settings (tests/data/lora), and the refusals.
#include "dscpp/model.h"

#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#if !defined(DSCPP_TEST_LLAMA_PLUGIN) || !defined(DSCPP_TEST_GPT2_PLUGIN) || !defined(DSCPP_TEST_T5_PLUGIN) || \
    !defined(DSCPP_TEST_SOURCE_ROOT)
#error "the build defines the plugins' paths and the source root"
#endif

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kRoot = DSCPP_TEST_SOURCE_ROOT;

const dscpp_model_api* load(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // kept: the api lives in the object
  INFO("dlopen " << path << ": " << (handle ? "ok" : dlerror()));
  REQUIRE(handle != nullptr);
  auto entry = reinterpret_cast<dscpp_model_entry_fn>(dlsym(handle, DSCPP_MODEL_ENTRY_SYMBOL));
  REQUIRE(entry != nullptr);
  return entry();
}

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  dscpp_param_desc desc;
};

// A model made with `args`, described; or the message its create failed with.
struct Made {
  bool ok = false;
  std::string error, adapter_from, adapter_text;
  json adapter_config;
  std::vector<Param> params;
};

Made make(const char* plugin, std::vector<std::string> args) {
  const dscpp_model_api* api = load(plugin);
  args.insert(args.begin(), plugin);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  dscpp_host_info host{};
  host.struct_size = sizeof host;
  host.world_size = 1;
  host.compute_dtype = DSCPP_F32;
  host.device_name = "cpu";
  void* model = nullptr;
  dscpp_error err{};
  Made m;
  if (api->create(int(argv.size()), argv.data(), &host, &model, &err) != DSCPP_OK) {
    m.error = err.message;
    return m;
  }
  m.ok = true;
  dscpp_model_desc d{};
  REQUIRE(api->describe(model, &d, &err) == DSCPP_OK);
  if (d.adapter_from) m.adapter_from = d.adapter_from;
  if (d.adapter_config) m.adapter_text = d.adapter_config, m.adapter_config = json::parse(d.adapter_config);
  for (int32_t l = 0; l < d.num_layers; ++l) {
    dscpp_layer_desc ld{};
    REQUIRE(api->layer(model, l, &ld, &err) == DSCPP_OK);
    for (int32_t i = 0; i < ld.num_params; ++i) {
      const dscpp_param_desc& p = ld.params[i];
      m.params.push_back({p.full_name, std::vector<int64_t>(p.shape, p.shape + p.ndim), p});
    }
  }
  api->destroy(model);
  return m;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

// PEFT's file for the same settings (made by a model of no directory, as --config's are), byte for byte.
void check_peft_config(const Made& m, const std::string& peft_file) {
  std::ifstream in(peft_file);
  const std::string peft((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(m.adapter_text == peft);
}

// Every adapter declared as PEFT names it, with A [r, in] (PEFT's init), B [out, r] (zeros), both
// trained; every other parameter frozen; returns the adapted modules.
std::vector<std::string> check_adapters(const Made& m, int64_t r) {
  std::map<std::string, const Param*> by_name;
  for (const Param& p : m.params) by_name[p.name] = &p;
  std::vector<std::string> modules;
  for (const Param& p : m.params) {
    INFO(p.name);
    const bool adapter = p.name.find(".lora_") != std::string::npos;
    CHECK(p.desc.adapter == (adapter ? 1 : 0));
    CHECK(p.desc.frozen == (adapter ? 0 : 1));
    if (!adapter) continue;
    CHECK(p.desc.file_transposed == 0);
    CHECK(p.desc.role == DSCPP_ROLE_WEIGHT);
    CHECK(p.desc.tied_to == nullptr);
    const bool is_a = p.name.find(".lora_A.weight") != std::string::npos;
    const std::string module = p.name.substr(0, p.name.find(".lora_"));
    REQUIRE(by_name.count(module + ".weight"));
    const std::vector<int64_t>& w = by_name[module + ".weight"]->shape;  // [out, in]
    CHECK(p.shape == (is_a ? std::vector<int64_t>{r, w[1]} : std::vector<int64_t>{w[0], r}));
    if (is_a) {
      CHECK(p.desc.init == DSCPP_INIT_UNIFORM);
      CHECK(p.desc.init_a == Approx(1 / std::sqrt(double(w[1]))));
      modules.push_back(module);
      CHECK(by_name.count(module + ".lora_B.weight"));
    } else {
      CHECK(p.desc.init == DSCPP_INIT_ZEROS);
    }
  }
  return modules;
}

const std::vector<std::string> kLlama = {"--config", kRoot + "/models/llama/tiny-config.json", "--context", "16"};

std::vector<std::string> with(std::vector<std::string> v, std::vector<std::string> more) {
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

TEST_CASE("Llama with --lora: q_proj and v_proj adapted in every layer, PEFT's adapter_config", "[lora]") {
  const Made m = make(DSCPP_TEST_LLAMA_PLUGIN, with(kLlama, {"--lora", "r=16,alpha=32,target=q_proj,v_proj"}));
  INFO(m.error);
  REQUIRE(m.ok);
  const std::vector<std::string> modules = check_adapters(m, 16);
  REQUIRE(modules.size() == 8);
  CHECK(modules[0] == "model.layers.0.self_attn.q_proj");
  CHECK(modules[1] == "model.layers.0.self_attn.v_proj");
  for (const Param& p : m.params)
    if (p.name == "model.layers.3.self_attn.v_proj.lora_B.weight") CHECK(p.shape == std::vector<int64_t>{128, 16});
  CHECK(m.adapter_from.empty());
  check_peft_config(m, kRoot + "/tests/data/lora/llama/adapter_config.json");

  SECTION("a model without --lora freezes nothing and declares no adapter config") {
    const Made plain = make(DSCPP_TEST_LLAMA_PLUGIN, kLlama);
    REQUIRE(plain.ok);
    CHECK(plain.adapter_config.is_null());
    for (const Param& p : plain.params) CHECK((p.desc.frozen == 0 && p.desc.adapter == 0));
  }
}

TEST_CASE("--lora_from reads PEFT's adapter directory", "[lora]") {
  const fs::path dir = fs::temp_directory_path() / ("dscpp_lora_from_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kRoot + "/tests/data/lora/llama/adapter_config.json", dir / "adapter_config.json",
                fs::copy_options::overwrite_existing);
  const std::vector<std::string> args = with(kLlama, {"--lora_from", dir.string()});
  Made m = make(DSCPP_TEST_LLAMA_PLUGIN, args);
  CHECK_FALSE(m.ok);
  CHECK(m.error.find((dir / "adapter_model.safetensors").string() + " does not exist") != std::string::npos);
  std::ofstream(dir / "adapter_model.safetensors").put('\0');  // only its presence is checked here
  m = make(DSCPP_TEST_LLAMA_PLUGIN, args);
  INFO(m.error);
  REQUIRE(m.ok);
  CHECK(m.adapter_from == (dir / "adapter_model.safetensors").string());
  CHECK(check_adapters(m, 16).size() == 8);
  check_peft_config(m, kRoot + "/tests/data/lora/llama/adapter_config.json");

  m = make(DSCPP_TEST_LLAMA_PLUGIN, with(args, {"--lora", "r=2"}));
  CHECK(m.error.find("--lora makes a new adapter and --lora_from reads PEFT's: give one") != std::string::npos);
  json c = read_json(dir / "adapter_config.json");
  auto refused = [&](const std::string& key, const json& value, const std::string& text) {
    json bad = c;
    bad[key] = value;
    std::ofstream(dir / "adapter_config.json") << bad.dump();
    const Made e = make(DSCPP_TEST_LLAMA_PLUGIN, args);
    INFO(e.error);
    CHECK(e.error.find((dir / "adapter_config.json").string() + ": \"" + key + "\": expected " + text) !=
          std::string::npos);
  };
  refused("lora_dropout", 1.0, "a dropout probability in [0, 1)");
  refused("peft_type", "IA3", "\"LORA\"");
  refused("bias", "all", "\"none\"");
  refused("r", 0, "a positive rank");
  refused("target_modules", nullptr, "a list of module names or a regular expression");
  refused("use_dora", true, "false (DoRA is not implemented)");
  refused("rank_pattern", json{{"q_proj", 4}}, "{}");
  fs::remove_all(dir);
}

TEST_CASE("GPT-2 with --lora on c_attn: the fused q/k/v projection adapted whole, fan_in_fan_out", "[lora]") {
  const Made m = make(DSCPP_TEST_GPT2_PLUGIN, {"--config", kRoot + "/tests/data/hf/gpt2/config.json", "--context", "16",
                                               "--lora", "r=4,target=c_attn"});
  INFO(m.error);
  REQUIRE(m.ok);
  const std::vector<std::string> modules = check_adapters(m, 4);
  CHECK(modules == std::vector<std::string>{"transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"});
  for (const Param& p : m.params) {
    if (p.name == "transformer.h.0.attn.c_attn.weight") CHECK(p.desc.file_transposed == 1);
    if (p.name == "transformer.h.0.attn.c_attn.lora_B.weight") CHECK(p.shape == std::vector<int64_t>{96, 4});
  }
  check_peft_config(m, kRoot + "/tests/data/lora/gpt2/adapter_config.json");
}

TEST_CASE("T5 with a target_regex and rslora: self- and cross-attention adapted, SEQ_2_SEQ_LM", "[lora]") {
  const std::vector<std::string> t5 = {
      "--config", kRoot + "/tests/data/hf/t5_v10/config.json", "--max_source_length", "12", "--max_target_length", "8"};
  const Made m = make(DSCPP_TEST_T5_PLUGIN, with(t5, {"--lora", R"(r=4,target_regex=.*\.(q|v),rslora)"}));
  INFO(m.error);
  REQUIRE(m.ok);
  const std::vector<std::string> modules = check_adapters(m, 4);
  CHECK(modules.size() == 12);  // 2 encoder blocks × (q, v) + 2 decoder blocks × (self q, v + cross q, v)
  CHECK(std::find(modules.begin(), modules.end(), "decoder.block.1.layer.1.EncDecAttention.v") != modules.end());
  check_peft_config(m, kRoot + "/tests/data/lora/t5/adapter_config.json");

  Made e = make(DSCPP_TEST_T5_PLUGIN, with(t5, {"--lora", "r=4,target=q,relative_attention_bias"}));
  CHECK(e.error.find("target \"relative_attention_bias\" matches "
                     "encoder.block.0.layer.0.SelfAttention.relative_attention_bias, which is an embedding") !=
        std::string::npos);
  e = make(DSCPP_TEST_T5_PLUGIN, with(t5, {"--lora", "r=4,target=q,lm_head"}));
  CHECK(e.error.find("target \"lm_head\" matches lm_head, whose weight is tied") != std::string::npos);
  e = make(DSCPP_TEST_T5_PLUGIN, with(t5, {"--lora", "r=4,target=shared"}));
  CHECK(e.error.find("target \"shared\" matches shared, which is an embedding") != std::string::npos);
}

TEST_CASE("--lora SPEC: PEFT's defaults, list continuation, and errors that say what they expected", "[lora]") {
  auto error = [](const std::string& spec) {
    const Made m = make(DSCPP_TEST_LLAMA_PLUGIN, with(kLlama, {"--lora", spec}));
    return m.ok ? std::string("accepted") : m.error;
  };
  // PEFT's LoraConfig defaults (r 8, lora_alpha 8) and its default targets for a llama.
  Made m = make(DSCPP_TEST_LLAMA_PLUGIN, with(kLlama, {"--lora", "r=8"}));
  REQUIRE(m.ok);
  CHECK(m.adapter_config["lora_alpha"] == 8);
  CHECK(m.adapter_config["target_modules"] == json{"q_proj", "v_proj"});
  m = make(DSCPP_TEST_LLAMA_PLUGIN, with(kLlama, {"--lora=lora_alpha=3.5,target_modules=v_proj,o_proj,down_proj,"
                                                  "use_rslora=false,r=2,lora_dropout=0.05"}));
  INFO(m.error);
  REQUIRE(m.ok);
  CHECK(m.adapter_config["lora_alpha"] == 3.5);
  CHECK(m.adapter_config["lora_dropout"] == 0.05);
  CHECK(m.adapter_config["target_modules"] == json{"down_proj", "o_proj", "v_proj"});
  CHECK(check_adapters(m, 2).size() == 12);
  CHECK(error("r=0,target=q_proj").find("r must be a positive integer rank, found \"0\"") != std::string::npos);
  CHECK(error("r=-3").find("r must be a positive integer rank, found \"-3\"") != std::string::npos);
  CHECK(error("r=4,alpha").find("alpha needs a value") != std::string::npos);
  CHECK(error("r=4,alpha=").find("alpha needs a value") != std::string::npos);
  CHECK(error("r=4,alhpa=16").find("unknown key \"alhpa\" (the closest is alpha)") != std::string::npos);
  CHECK(error("r=4,target=q_proj,traget=v_proj").find("unknown key \"traget\" (the closest is target)") !=
        std::string::npos);
  CHECK(error("r=4,dropout=1").find("dropout=1: the dropout probability must be in [0, 1)") != std::string::npos);
  CHECK(error("r=4,lora_dropout=-0.1").find("the dropout probability must be in [0, 1)") != std::string::npos);
  CHECK(error("r=4,target=q_proj,r=2").find("r is given twice") != std::string::npos);
  const std::string none = error("r=4,target=q_proj,c_attn");
  CHECK(none.find("target \"c_attn\" matches no Linear module") != std::string::npos);
  CHECK(none.find("model.layers.*.self_attn.q_proj, model.layers.*.self_attn.k_proj") != std::string::npos);
  CHECK(error("r=4,target=lm_head").find("whose weight is tied") != std::string::npos);
  CHECK(error("r=4,target=embed_tokens").find("which is an embedding") != std::string::npos);
  CHECK(error("target_regex=.*_proj,{1,2}x").find("matches no whole Linear module name") != std::string::npos);
}

}  // namespace
