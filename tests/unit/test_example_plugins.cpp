// The example model plugins (examples/mlp, examples/gpt), loaded the way the runtime loads
// them: dlopen + dscpp_model_entry, then driven through the ABI with the CPU ops table. The
// test owns every buffer (params, grads, activations, saved, workspace) and checks every
// parameter's gradient against central finite differences of the total loss.
#include "dscpp/model.h"
#include "kernels/cpu/ops/cpu_ops.h"

#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#ifndef DSCPP_TEST_MLP_PLUGIN
#error "DSCPP_TEST_MLP_PLUGIN (path of libmlp.so) must be defined by the build"
#endif
#ifndef DSCPP_TEST_GPT_PLUGIN
#error "DSCPP_TEST_GPT_PLUGIN (path of libgpt.so) must be defined by the build"
#endif

namespace {

const dscpp_model_api* load_plugin(const char* path) {
  // Kept loaded for the process: the api struct lives in the object.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  INFO("dlopen " << path << ": " << (handle ? "ok" : dlerror()));
  REQUIRE(handle != nullptr);
  auto entry = reinterpret_cast<dscpp_model_entry_fn>(dlsym(handle, DSCPP_MODEL_ENTRY_SYMBOL));
  REQUIRE(entry != nullptr);
  const dscpp_model_api* api = entry();
  REQUIRE(api != nullptr);
  return api;
}

void check_stamp(const dscpp_model_api* api) {
  CHECK(api->abi_version == DSCPP_MODEL_ABI_VERSION);
  CHECK(api->api_size == sizeof(dscpp_model_api));
  CHECK(api->ops_size == sizeof(dscpp_ops));
  CHECK(api->layer_ctx_size == sizeof(dscpp_layer_ctx));
  CHECK(api->layer_desc_size == sizeof(dscpp_layer_desc));
  CHECK(api->param_desc_size == sizeof(dscpp_param_desc));
  CHECK(api->host_info_size == sizeof(dscpp_host_info));
  CHECK(api->create != nullptr);
  CHECK(api->destroy != nullptr);
  CHECK(api->describe != nullptr);
  CHECK(api->layer != nullptr);
  CHECK(api->forward != nullptr);
  CHECK(api->backward != nullptr);
  CHECK(api->load_sample != nullptr);
}

std::vector<std::string> g_log;
void capture_log(void*, const char* message) { g_log.emplace_back(message); }

dscpp_host_info host_info() {
  dscpp_host_info h{};
  h.struct_size = sizeof h;
  h.rank = 0;
  h.world_size = 1;
  h.local_rank = 0;
  h.compute_dtype = DSCPP_F32;
  h.seed = 1234;
  h.device_name = "cpu";
  h.log = capture_log;
  return h;
}

int create(const dscpp_model_api* api, std::vector<std::string> args, void** model, dscpp_error* err) {
  args.insert(args.begin(), "plugin");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  dscpp_host_info host = host_info();
  *err = dscpp_error{};
  return api->create(static_cast<int>(argv.size()), argv.data(), &host, model, err);
}

int64_t numel(const dscpp_param_desc& p) {
  int64_t n = 1;
  for (int d = 0; d < p.ndim; ++d) n *= p.shape[d];
  return n;
}

// Drives one model through the ABI with host-side (CPU device) buffers.
struct Harness {
  const dscpp_model_api* api;
  void* model;
  dscpp_ops ops = dscpp::kernels::cpu_ops(DSCPP_F32, nullptr);
  dscpp_model_desc desc{};
  std::vector<dscpp_layer_desc> layers;
  std::vector<std::vector<std::vector<float>>> params, grads;  // [layer][param][element]
  std::vector<std::vector<float>> outputs, saved;
  std::vector<float> grad_io[2];
  std::vector<float> workspace;
  std::vector<int32_t> input_ids, targets;  // input_ids for I32 inputs
  std::vector<float> input_f32;
  int64_t batch;

  static constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

  Harness(const dscpp_model_api* a, void* m, int64_t b) : api(a), model(m), batch(b) {
    dscpp_error err{};
    REQUIRE(api->describe(model, &desc, &err) == DSCPP_OK);
    int64_t ws = 0, widest = 0;
    for (int32_t l = 0; l < desc.num_layers; ++l) {
      dscpp_layer_desc d{};
      INFO("layer " << l << ": " << err.message);
      REQUIRE(api->layer(model, l, &d, &err) == DSCPP_OK);
      layers.push_back(d);
      params.emplace_back();
      grads.emplace_back();
      for (int32_t p = 0; p < d.num_params; ++p) {
        params.back().emplace_back(numel(d.params[p]));
        grads.back().emplace_back(numel(d.params[p]), 0.0f);
      }
      outputs.emplace_back(batch * d.output_numel);
      saved.emplace_back((batch * d.saved_bytes + 3) / 4);
      ws = std::max(ws, d.workspace_bytes);
      widest = std::max(widest, d.output_numel);
    }
    workspace.resize((batch * ws + 3) / 4);
    grad_io[0].resize(batch * widest);
    grad_io[1].resize(batch * widest);
    targets.resize(batch * desc.data.target_numel);
    if (desc.data.input_dtype == DSCPP_I32) input_ids.resize(batch * desc.data.input_numel);
    else input_f32.resize(batch * desc.data.input_numel);
  }

  // Small random values from the test's own generator: weights U(±1/√fan_in), vectors U(±0.1),
  // layer-norm-like (init ONES) params 1 + U(±0.1), so that every path carries gradient.
  void randomise(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t l = 0; l < layers.size(); ++l)
      for (int32_t p = 0; p < layers[l].num_params; ++p) {
        const dscpp_param_desc& d = layers[l].params[p];
        float a = d.ndim >= 2 ? 1.0f / std::sqrt(static_cast<float>(d.shape[d.ndim - 1])) : 0.1f;
        float base = d.init == DSCPP_INIT_ONES ? 1.0f : 0.0f;
        std::uniform_real_distribution<float> u(-a, a);
        for (float& v : params[l][p]) v = base + u(rng);
      }
  }

  void load_batch(int32_t split, int64_t first) {
    for (int64_t i = 0; i < batch; ++i) {
      dscpp_error err{};
      void* in = desc.data.input_dtype == DSCPP_I32 ? static_cast<void*>(input_ids.data() + i * desc.data.input_numel)
                                                    : static_cast<void*>(input_f32.data() + i * desc.data.input_numel);
      INFO(err.message);
      REQUIRE(api->load_sample(model, split, first + i, in, targets.data() + i * desc.data.target_numel, &err) ==
              DSCPP_OK);
    }
  }

  const void* data_input() const {
    return desc.data.input_dtype == DSCPP_I32 ? static_cast<const void*>(input_ids.data())
                                              : static_cast<const void*>(input_f32.data());
  }

  std::vector<const void*> param_ptrs(size_t l) const {
    std::vector<const void*> v;
    for (const auto& p : params[l]) v.push_back(p.data());
    return v;
  }

  dscpp_layer_ctx ctx(size_t l, const std::vector<const void*>& pp) {
    dscpp_layer_ctx c{};
    c.struct_size = sizeof c;
    c.ops = &ops;
    c.batch = batch;
    c.training = 1;
    c.rng_seed = 77 + l;
    c.params = pp.data();
    c.input = l == 0 ? data_input() : outputs[l - 1].data();
    c.output = outputs[l].data();
    c.saved = saved[l].data();
    c.workspace = workspace.data();
    return c;
  }

  // Forward through every layer; returns the mean loss (the objective the backward pass
  // differentiates with loss_grad = 1). Scratch the plugin must overwrite is NaN-filled first.
  double forward(dscpp_metrics* out = nullptr) {
    dscpp_metrics metrics{};
    for (size_t l = 0; l < layers.size(); ++l) {
      std::fill(saved[l].begin(), saved[l].end(), kNaN);
      std::fill(workspace.begin(), workspace.end(), kNaN);
      std::fill(outputs[l].begin(), outputs[l].end(), kNaN);
      auto pp = param_ptrs(l);
      dscpp_layer_ctx c = ctx(l, pp);
      if (l + 1 == layers.size()) {
        c.target = targets.data();
        c.metrics = &metrics;
      }
      dscpp_error err{};
      INFO("forward " << layers[l].name << ": " << err.message);
      REQUIRE(api->forward(model, static_cast<int32_t>(l), &c, &err) == DSCPP_OK);
    }
    if (out != nullptr) *out = metrics;
    REQUIRE(metrics.counted > 0);
    return metrics.loss_sum / static_cast<double>(metrics.counted);
  }

  void zero_grads() {
    for (auto& layer : grads)
      for (auto& g : layer) std::fill(g.begin(), g.end(), 0.0f);
  }

  // Backward from the loss layer to layer 0 (grads accumulate, as the ABI says).
  void backward(float loss_grad = 1.0f) {
    const float* grad_out = nullptr;
    for (size_t l = layers.size(); l-- > 0;) {
      auto pp = param_ptrs(l);
      std::vector<void*> gp;
      for (auto& g : grads[l]) gp.push_back(g.data());
      dscpp_layer_ctx c = ctx(l, pp);
      c.grads = gp.data();
      c.grad_output = grad_out;
      std::vector<float>& gin = grad_io[l % 2];
      std::fill(gin.begin(), gin.end(), kNaN);  // overwritten, never read
      std::fill(workspace.begin(), workspace.end(), kNaN);
      c.grad_input = l == 0 ? nullptr : gin.data();
      if (l + 1 == layers.size()) {
        c.target = targets.data();
        c.loss_grad = loss_grad;
      }
      dscpp_error err{};
      INFO("backward " << layers[l].name << ": " << err.message);
      REQUIRE(api->backward(model, static_cast<int32_t>(l), &c, &err) == DSCPP_OK);
      grad_out = gin.data();
    }
  }
};

struct CheckOptions {
  float step;
  double atol, rtol;
  // For ReLU nets: layers whose output sign pattern must not change across the ±step pair
  // (a kink crossed inside [θ−h, θ+h] makes the central difference meaningless there).
  bool relu_kinks = false;
  int samples_per_tensor = 8;
};

// Checks a sample of every parameter tensor's gradient against central differences.
void gradient_check(Harness& h, const CheckOptions& o, uint64_t seed) {
  h.zero_grads();
  const double loss0 = h.forward();
  REQUIRE(std::isfinite(loss0));
  h.backward(1.0f);
  std::mt19937_64 rng(seed);
  auto sign_pattern = [&] {
    std::vector<bool> s;
    for (size_t l = 0; l + 1 < h.layers.size(); ++l)
      for (float v : h.outputs[l]) s.push_back(v > 0);
    return s;
  };
  int checked = 0, kink_retries = 0, skipped = 0;
  double worst_rel = 0;
  std::string worst_name;
  for (size_t l = 0; l < h.layers.size(); ++l)
    for (int32_t p = 0; p < h.layers[l].num_params; ++p) {
      std::vector<float>& theta = h.params[l][p];
      const std::vector<float>& grad = h.grads[l][p];
      const std::string name = std::string(h.layers[l].name) + "." + h.layers[l].params[p].name;
      std::uniform_int_distribution<size_t> pick(0, theta.size() - 1);
      for (int s = 0; s < o.samples_per_tensor; ++s) {
        const size_t i = pick(rng);
        const float orig = theta[i];
        double fd = 0;
        bool ok = false;
        for (float step = o.step; step >= o.step / 100; step /= 10) {
          theta[i] = orig + step;
          const double plus = h.forward();
          std::vector<bool> sp = o.relu_kinks ? sign_pattern() : std::vector<bool>{};
          theta[i] = orig - step;
          const double minus = h.forward();
          std::vector<bool> sm = o.relu_kinks ? sign_pattern() : std::vector<bool>{};
          theta[i] = orig;
          // The step actually taken in fp32 (orig ± step rounds).
          const double span = static_cast<double>(orig + step) - static_cast<double>(orig - step);
          fd = (plus - minus) / span;
          if (sp == sm) {
            ok = true;
            break;
          }
          ++kink_retries;
        }
        if (!ok) {
          ++skipped;
          continue;
        }
        const double an = grad[i];
        const double err = std::fabs(fd - an);
        INFO(name << "[" << i << "]: analytic " << an << ", finite difference " << fd << ", |diff| " << err);
        CHECK(err <= o.atol + o.rtol * std::fabs(an));
        if (std::fabs(an) > 10 * o.atol) {
          const double rel = err / std::fabs(an);
          if (rel > worst_rel) {
            worst_rel = rel;
            worst_name = name + "[" + std::to_string(i) + "]";
          }
        }
        ++checked;
      }
    }
  WARN("gradient check: " << checked << " elements, worst relative error " << worst_rel << " at " << worst_name
                          << " (among |g| > " << 10 * o.atol << "), " << kink_retries << " ReLU-kink retries, "
                          << skipped << " skipped");
  // Relative error among gradients well above the noise floor: the double-check.
  CHECK(worst_rel <= o.rtol);
  CHECK(skipped * 10 <= checked);
}

// Grads accumulate across backward calls and grad_input is overwritten (NaN-filled before each
// call, so any read of it would poison the gradients).
void check_accumulation(Harness& h) {
  h.zero_grads();
  h.forward();
  h.backward(1.0f);
  auto once = h.grads;
  h.backward(1.0f);
  for (size_t l = 0; l < h.grads.size(); ++l)
    for (size_t p = 0; p < h.grads[l].size(); ++p)
      for (size_t i = 0; i < h.grads[l][p].size(); ++i) {
        INFO(h.layers[l].name << "." << h.layers[l].params[p].name << "[" << i << "]");
        REQUIRE(std::isfinite(h.grads[l][p][i]));
        REQUIRE(h.grads[l][p][i] == Approx(2 * once[l][p][i]).margin(1e-6));
      }
  // loss_grad scales linearly.
  h.zero_grads();
  h.backward(0.5f);
  for (size_t l = 0; l < h.grads.size(); ++l)
    for (size_t p = 0; p < h.grads[l].size(); ++p)
      for (size_t i = 0; i < h.grads[l][p].size(); i += 7)
        REQUIRE(h.grads[l][p][i] == Approx(0.5 * once[l][p][i]).margin(1e-6));
}

void check_bounds(const dscpp_model_api* api, void* model, const dscpp_data_desc& d) {
  std::vector<float> in(d.input_numel);
  std::vector<int32_t> tgt(d.target_numel);
  dscpp_error err{};
  CHECK(api->load_sample(model, 0, d.train_size - 1, in.data(), tgt.data(), &err) == DSCPP_OK);
  for (auto [split, index] : {std::pair<int32_t, int64_t>{0, d.train_size}, {0, -1}, {1, d.eval_size}, {2, 0}}) {
    err = dscpp_error{};
    CHECK(api->load_sample(model, split, index, in.data(), tgt.data(), &err) == DSCPP_E_INVALID_ARGUMENT);
    INFO("message: " << err.message);
    CHECK(std::strlen(err.message) > 0);
    if (split != 2) CHECK(std::string(err.message).find(std::to_string(index)) != std::string::npos);
  }
}

std::filesystem::path temp_dir(const char* tag) {
  auto dir =
      std::filesystem::temp_directory_path() / (std::string("dscpp_examples_") + tag + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("mlp plugin: ABI, data, gradients", "[examples][mlp]") {
  const dscpp_model_api* api = load_plugin(DSCPP_TEST_MLP_PLUGIN);
  check_stamp(api);
  CHECK(std::string(api->name) == "mlp");

  void* model = nullptr;
  dscpp_error err{};
  g_log.clear();
  INFO(err.message);
  REQUIRE(create(api, {"--limit", "64", "--hidden", "8"}, &model, &err) == DSCPP_OK);
  Harness h(api, model, 8);
  CHECK(h.desc.num_layers == 2);
  CHECK(h.desc.data.train_size == 64);
  CHECK(h.desc.data.eval_size == 10000);
  CHECK(h.desc.data.input_dtype == DSCPP_F32);
  CHECK(h.desc.data.input_numel == 784);
  CHECK(h.desc.data.target_dtype == DSCPP_I32);
  CHECK(h.desc.data.target_numel == 1);
  CHECK(h.desc.data.tokens_per_sample == 0);
  CHECK(std::string(h.layers[0].name) == "fc1");
  CHECK(std::string(h.layers[1].name) == "head");
  CHECK(h.layers[0].output_numel == 8);
  CHECK(h.layers[1].output_numel == 10);
  REQUIRE(h.layers[0].num_params == 2);
  CHECK(std::string(h.layers[0].params[0].name) == "weight");
  CHECK(h.layers[0].params[0].ndim == 2);
  CHECK(h.layers[0].params[0].shape[0] == 8);
  CHECK(h.layers[0].params[0].shape[1] == 784);
  CHECK(h.layers[0].params[0].init == DSCPP_INIT_UNIFORM);
  CHECK(h.layers[0].params[0].init_a == Approx(1 / 28.0));
  CHECK(h.layers[1].params[1].init == DSCPP_INIT_ZEROS);
  check_bounds(api, model, h.desc.data);

  // Labels are classes, pixels are normalised.
  h.load_batch(0, 0);
  for (int32_t t : h.targets) CHECK((t >= 0 && t < 10));
  for (float x : h.input_f32) CHECK((x >= -0.82f && x <= 2.03f));

  h.randomise(1);
  dscpp_metrics m{};
  double loss = h.forward(&m);
  CHECK(m.counted == 8);
  CHECK((m.correct >= 0 && m.correct <= 8));
  CHECK((loss > 0.5 && loss < 6));

  // Step and tolerance: the loss is a mean over 8 rows computed in fp32, so each evaluation
  // carries ~1e-6 of rounding noise (the logits sum 784 fp32 products); with h = 1e-2 the
  // central difference's noise is ~1e-6/(2h) = 5e-5 and its truncation error h²/6·|f'''| is
  // ~1e-5 for these magnitudes. Hence atol 3e-4 (noise with a 6× margin) and rtol 2e-2. A
  // crossed ReLU kink is detected (hidden sign pattern differs between θ+h and θ−h) and the
  // element retried with h/10, h/100.
  gradient_check(h, CheckOptions{1e-2f, 3e-4, 2e-2, true}, 11);
  check_accumulation(h);
  api->destroy(model);

  SECTION("bad arguments and data") {
    void* bad = nullptr;
    CHECK(create(api, {"--hidden", "8,x"}, &bad, &err) == DSCPP_E_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("--hidden") != std::string::npos);
    CHECK(create(api, {"--bogus"}, &bad, &err) == DSCPP_E_INVALID_ARGUMENT);
    CHECK(create(api, {"--data", "/nonexistent/dir"}, &bad, &err) == DSCPP_E_IO);
    CHECK(std::string(err.message).find("/nonexistent/dir/train-images-idx3-ubyte.gz") != std::string::npos);
    // A gzip'd file with the wrong magic number.
    auto dir = temp_dir("mlp");
    gzFile f = gzopen((dir / "train-images-idx3-ubyte.gz").c_str(), "wb");
    REQUIRE(f != nullptr);
    const unsigned char header[16] = {0, 0, 8, 1, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28};
    gzwrite(f, header, sizeof header);
    gzclose(f);
    CHECK(create(api, {"--data", dir.string()}, &bad, &err) == DSCPP_E_IO);
    INFO(err.message);
    CHECK(std::string(err.message).find("magic number 0x00000801") != std::string::npos);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("gpt plugin: ABI, data, gradients", "[examples][gpt]") {
  const dscpp_model_api* api = load_plugin(DSCPP_TEST_GPT_PLUGIN);
  check_stamp(api);
  CHECK(std::string(api->name) == "gpt");

  // A small text: 2000 bytes over 30-odd symbols, including a newline.
  auto dir = temp_dir("gpt");
  const auto path = dir / "text.txt";
  std::string text;
  const std::string words[] = {"the ",  "quick ", "brown ", "fox ",   "jumps ",
                               "over ", "a ",     "lazy ",  "dog.\n", "Zebra! "};
  std::mt19937 rng(5);
  while (text.size() < 2000) text += words[rng() % 10];
  text.resize(2000);
  std::ofstream(path, std::ios::binary) << text;

  void* model = nullptr;
  dscpp_error err{};
  g_log.clear();
  INFO(err.message);
  REQUIRE(create(api, {"--data", path.string(), "--layers", "2", "--d_model", "16", "--heads", "2", "--context", "8"},
                 &model, &err) == DSCPP_OK);

  // Vocabulary = sorted distinct bytes; unigram entropy logged on rank 0.
  std::map<unsigned char, int64_t> counts;
  for (unsigned char c : text) ++counts[c];
  std::map<unsigned char, int32_t> id;
  for (auto& [c, n] : counts) id.emplace(c, static_cast<int32_t>(id.size()));
  double bits = 0;
  for (auto& [c, n] : counts) bits -= n / 2000.0 * std::log2(n / 2000.0);
  char expect[64];
  std::snprintf(expect, sizeof expect, "unigram entropy %.4f bits/char", bits);
  bool logged = false;
  for (const std::string& line : g_log) logged |= line.find(expect) != std::string::npos;
  INFO("expected '" << expect << "' in the log: " << (g_log.empty() ? "" : g_log[0]));
  CHECK(logged);

  const int64_t V = static_cast<int64_t>(counts.size());
  Harness h(api, model, 2);
  CHECK(h.desc.num_layers == 4);
  CHECK(h.desc.data.train_size == 222 * 9 / 10);  // ⌊2000/9⌋ = 222 windows
  CHECK(h.desc.data.eval_size == 222 - 222 * 9 / 10);
  CHECK(h.desc.data.input_dtype == DSCPP_I32);
  CHECK(h.desc.data.input_numel == 8);
  CHECK(h.desc.data.target_numel == 8);
  CHECK(h.desc.data.tokens_per_sample == 8);
  const char* names[] = {"embed", "blocks.0", "blocks.1", "head"};
  for (int l = 0; l < 4; ++l) CHECK(std::string(h.layers[l].name) == names[l]);
  CHECK(h.layers[0].output_numel == 8 * 16);
  CHECK(h.layers[1].output_numel == 8 * 16);
  CHECK(h.layers[3].output_numel == 8 * V);
  CHECK(h.layers[0].params[0].shape[0] == V);
  CHECK(h.layers[0].params[1].shape[0] == 8);
  REQUIRE(h.layers[1].num_params == 12);
  CHECK(std::string(h.layers[1].params[2].name) == "attn.c_attn.weight");
  CHECK(h.layers[1].params[2].shape[0] == 48);
  CHECK(h.layers[1].params[2].init_a == Approx(0.02));
  CHECK(std::string(h.layers[1].params[10].name) == "mlp.c_proj.weight");
  CHECK(h.layers[1].params[10].init_a == Approx(0.02 / 2.0));  // 0.02/√(2·2)
  CHECK(h.layers[1].params[0].init == DSCPP_INIT_ONES);
  REQUIRE(h.layers[3].num_params == 3);
  CHECK(std::string(h.layers[3].params[2].name) == "lm_head.weight");
  CHECK(h.layers[3].params[2].shape[0] == V);
  CHECK(h.layers[3].params[2].shape[1] == 16);
  for (const auto& L : h.layers) CHECK(L.saved_bytes >= 0);
  check_bounds(api, model, h.desc.data);

  // Windows: input = bytes [9w, 9w+8), target shifted by one; eval follows train.
  h.load_batch(1, 1);  // eval windows 1 and 2
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t w = h.desc.data.train_size + 1 + s;
    for (int t = 0; t < 8; ++t) {
      CHECK(h.input_ids[s * 8 + t] == id[static_cast<unsigned char>(text[w * 9 + t])]);
      CHECK(h.targets[s * 8 + t] == id[static_cast<unsigned char>(text[w * 9 + t + 1])]);
    }
  }

  h.load_batch(0, 3);
  h.randomise(2);
  dscpp_metrics m{};
  const double loss = h.forward(&m);
  CHECK(m.counted == 16);
  CHECK((loss > 1 && loss < 8));

  // Step and tolerance: the model is smooth (GELU, softmax, layer norm), so the central
  // difference's error is truncation h²/6·|f'''| plus fp32 noise. The loss (mean over 16
  // positions, ~3) carries ~3e-7 of rounding noise per evaluation → ~1.5e-5 at h = 1e-2;
  // truncation at h = 1e-2 is ≲1e-5 relative to O(1) curvature. atol 1e-4, rtol 2e-2.
  gradient_check(h, CheckOptions{1e-2f, 1e-4, 2e-2, false}, 12);
  check_accumulation(h);

  // The report hook generates text through a lent forward pass (here: the harness itself).
  struct Lender {
    dscpp_infer infer;
    Harness* h;
  } lender{{}, &h};
  lender.infer.runtime = &lender;
  lender.infer.max_batch = 2;
  lender.infer.forward = [](const dscpp_infer* in, const void* inputs, int64_t batch, float* out, dscpp_error*) {
    Harness& hh = *reinterpret_cast<const Lender*>(in->runtime)->h;
    const auto* ids = static_cast<const int32_t*>(inputs);
    std::fill(hh.input_ids.begin(), hh.input_ids.end(), 0);
    std::copy(ids, ids + batch * 8, hh.input_ids.begin());
    hh.forward();
    std::copy(hh.outputs.back().begin(), hh.outputs.back().begin() + batch * hh.layers.back().output_numel, out);
    return static_cast<int>(DSCPP_OK);
  };
  REQUIRE(api->report != nullptr);
  g_log.clear();
  err = dscpp_error{};
  INFO(err.message);
  CHECK(api->report(model, &lender.infer, &err) == DSCPP_OK);
  CHECK(g_log.size() >= 2);
  api->destroy(model);

  SECTION("bad arguments") {
    void* bad = nullptr;
    CHECK(create(api, {"--data", path.string(), "--d_model", "16", "--heads", "3"}, &bad, &err) ==
          DSCPP_E_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("--heads") != std::string::npos);
    CHECK(create(api, {"--data", path.string(), "--context", "5000"}, &bad, &err) == DSCPP_E_INVALID_ARGUMENT);
    CHECK(create(api, {"--data", (dir / "missing").string()}, &bad, &err) == DSCPP_E_IO);
    CHECK(create(api, {"--layers"}, &bad, &err) == DSCPP_E_INVALID_ARGUMENT);
  }
  std::filesystem::remove_all(dir);
}
