// Example model plugin: a small character-level GPT-2-style language model.
//
// Written only against the plugin ABI (include/dscpp/model.h) and libc/libstdc++, so the
// directory can be copied out of the tree and built on its own:
//   c++ -std=c++20 -O2 -shared -fPIC -I<dscpp>/include gpt.cpp -o libgpt.so
//
// Layers (C = d_model, T = context, V = vocabulary, H = heads, hd = C/H):
//   "embed"     wte.weight [V,C], wpe.weight [T,C]: x = wte[id] + wpe[t]
//   "blocks.i"  pre-LN transformer block, i = 0 … layers−1:
//                 h = x + attn.c_proj(causal_self_attention(attn.c_attn(ln_1(x))))
//                 y = h + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(h))))
//               params ln_1.{weight,bias} [C], attn.c_attn.{weight [3C,C], bias [3C]},
//               attn.c_proj.{weight [C,C], bias [C]}, ln_2.{weight,bias} [C],
//               mlp.c_fc.{weight [4C,C], bias [4C]}, mlp.c_proj.{weight [C,4C], bias [C]}
//   "head"      ln_f.{weight,bias} [C], lm_head.weight [V,C] (no bias, no weight tying);
//               output = logits [T,V]; loss = mean cross-entropy over every position.
// Linear weights are stored [out, in] like torch.nn.Linear (y = x·Wᵀ + b); the qkv output is
// [q | k | v], each C wide with head h at columns h·hd … (h+1)·hd. Layer norms use eps 1e-5.
// Init (GPT-2): N(0, 0.02) for linears and embeddings, N(0, 0.02/√(2·layers)) for the two
// residual projections (attn.c_proj, mlp.c_proj), layer-norm weights 1, biases 0.
//
// Plugin arguments (after `--`):
//   --data FILE         text to model (default: the Debian fortunes text, see below)
//   --layers N          transformer blocks (default 4)
//   --d_model N         width (default 256)
//   --heads N           attention heads, must divide d_model (default 4)
//   --context N         tokens per sample (default 128)
//   --sample_chars N    characters the report generates (default 200; 0 = no sample)
//   --temperature X     0 = greedy decoding (default); > 0 samples with a generator seeded
//                       from the run's seed
// Default text: every regular file (not a symlink) directly in /usr/share/games/fortunes
// whose name does not end in .dat or .u8, concatenated byte for byte in byte-wise sorted
// name order (bench/torch_gpt.py reads exactly the same).
// Vocabulary: the sorted set of distinct bytes of the text; token id = rank of the byte.
// Samples: non-overlapping windows of context+1 bytes, window w = text[w·(T+1), (w+1)·(T+1));
// input = its first T tokens, target = its last T. With n = ⌊len/(T+1)⌋ windows, train is
// windows [0, ⌊9n/10⌋) and eval the rest.
#include "dscpp/model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
constexpr float kLnEps = 1e-5f;

// ---- errors -------------------------------------------------------------------------------
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void fail(int code, std::string message) { throw Failure{code, std::move(message)}; }

void set_error(dscpp_error* err, const std::string& message) {
  if (err != nullptr) std::snprintf(err->message, DSCPP_ERROR_CAP, "%s", message.c_str());
}

template <class Body>
int guarded(dscpp_error* err, Body&& body) {
  try {
    body();
    return DSCPP_OK;
  } catch (const Failure& f) {
    set_error(err, f.message);
    return f.code;
  } catch (const std::bad_alloc&) {
    set_error(err, "gpt: out of host memory");
    return DSCPP_E_INTERNAL;
  } catch (const std::exception& e) {
    set_error(err, std::string("gpt: ") + e.what());
    return DSCPP_E_INTERNAL;
  }
}

// Calls one entry of the ops table and names it when it fails.
template <class Fn, class... Args>
void op(const char* name, Fn fn, const dscpp_ops* ops, Args... args) {
  if (fn == nullptr) fail(DSCPP_E_UNSUPPORTED, std::string("ops table has no ") + name);
  int status = fn(ops, args...);
  if (status != DSCPP_OK) fail(status, std::string("op ") + name + " failed with status " + std::to_string(status));
}

// ---- buffer layout ----------------------------------------------------------------------------
// A layer's saved/workspace buffer holds `batch` samples' worth of several tensors. We lay it
// out tensor-major (all samples of tensor 0, then all of tensor 1, …) so each tensor is one
// contiguous [batch·rows, cols] matrix; each per-sample size is rounded up to 64 bytes so every
// tensor starts aligned.
struct Layout {
  std::vector<int64_t> bytes;  // per sample, rounded
  int add(int64_t b) {
    bytes.push_back((b + 63) / 64 * 64);
    return static_cast<int>(bytes.size()) - 1;
  }
  int64_t total() const {
    int64_t t = 0;
    for (int64_t b : bytes) t += b;
    return t;
  }
  void* at(void* base, int k, int64_t batch) const {
    int64_t off = 0;
    for (int i = 0; i < k; ++i) off += bytes[i];
    return static_cast<char*>(base) + off * batch;
  }
};

// ---- the model ----------------------------------------------------------------------------
struct Config {
  std::string data;
  int64_t layers = 4, d_model = 256, heads = 4, context = 128, sample_chars = 200;
  double temperature = 0;
};

struct LayerInfo {
  std::string name;
  std::vector<std::string> param_names;  // storage for dscpp_param_desc::name
  std::vector<dscpp_param_desc> params;
  int64_t output_numel = 0;
  Layout saved, work;
};

// Indices of the block's saved tensors and workspace tensors.
enum BlockSaved { kLn1Out, kLn1Mean, kLn1Rstd, kQkv, kProbs, kAtt, kH1, kLn2Out, kLn2Mean, kLn2Rstd, kFc, kGelu };
enum BlockWork { kWDfc, kWDln, kWDh1, kWDatt, kWAttn, kWDqkv };
enum HeadSaved { kLnfOut, kLnfMean, kLnfRstd, kLogitProbs };
enum HeadWork { kWDlogits, kWDlnf };

struct Gpt {
  Config cfg;
  std::vector<uint8_t> text;
  std::vector<uint8_t> vocab;  // id → byte
  int32_t byte_to_id[256];
  int64_t windows = 0, train_windows = 0;
  size_t elem = 4;
  std::vector<LayerInfo> layers;
  dscpp_host_info host{};

  int64_t C() const { return cfg.d_model; }
  int64_t T() const { return cfg.context; }
  int64_t H() const { return cfg.heads; }
  int64_t V() const { return static_cast<int64_t>(vocab.size()); }
  void log(const std::string& line) const {
    if (host.log != nullptr) host.log(host.runtime, line.c_str());
  }
};

size_t dtype_bytes(dscpp_dtype d) { return d == DSCPP_F16 || d == DSCPP_BF16 ? 2 : 4; }

int64_t parse_int(const std::string& key, const std::string& v, int64_t lo) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: " + key + " wants an integer ≥ " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(DSCPP_E_IO, "gpt: " + path + ": cannot open: " + std::strerror(errno));
  // One block read: a per-character stream iterator costs a second per rank in debug builds.
  std::vector<uint8_t> bytes;
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) bytes.insert(bytes.end(), block, block + in.gcount());
  if (in.bad()) fail(DSCPP_E_IO, "gpt: " + path + ": read error");
  return bytes;
}

// The default corpus: see the file comment for the exact rule.
std::vector<std::string> fortune_files() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(kFortunesDir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    auto ends_with = [&](const char* s) {
      size_t n = std::strlen(s);
      return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
    };
    if (ends_with(".dat") || ends_with(".u8")) continue;
    std::error_code sec;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), sec))) continue;  // skips symlinks and dirs
    names.push_back(name);
  }
  if (ec) fail(DSCPP_E_IO, std::string("gpt: ") + kFortunesDir + ": " + ec.message() + " (install fortunes or pass --data FILE)");
  std::sort(names.begin(), names.end());
  return names;
}

void add_param(LayerInfo& L, const std::string& name, std::initializer_list<int64_t> shape, dscpp_init_kind init,
               float a = 0) {
  dscpp_param_desc d{};  // d.name is set once param_names stops growing
  d.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) d.shape[i++] = s;
  d.init = init;
  d.init_a = a;
  L.param_names.push_back(name);
  L.params.push_back(d);
}

Gpt* create_model(int argc, const char* const* argv, const dscpp_host_info* host) {
  auto m = std::make_unique<Gpt>();
  Config& cfg = m->cfg;
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i], value;
    size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
    } else {
      if (i + 1 >= argc) fail(DSCPP_E_INVALID_ARGUMENT, "gpt: " + key + " needs a value");
      value = argv[++i];
    }
    if (key == "--data") cfg.data = value;
    else if (key == "--layers") cfg.layers = parse_int(key, value, 1);
    else if (key == "--d_model") cfg.d_model = parse_int(key, value, 1);
    else if (key == "--heads") cfg.heads = parse_int(key, value, 1);
    else if (key == "--context") cfg.context = parse_int(key, value, 1);
    else if (key == "--sample_chars") cfg.sample_chars = parse_int(key, value, 0);
    else if (key == "--temperature") {
      char* end = nullptr;
      cfg.temperature = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(cfg.temperature >= 0))
        fail(DSCPP_E_INVALID_ARGUMENT, "gpt: --temperature wants a number ≥ 0, got '" + value + "'");
    } else {
      fail(DSCPP_E_INVALID_ARGUMENT, "gpt: unknown argument '" + key +
                                         "' (accepted: --data FILE, --layers N, --d_model N, --heads N, --context N, "
                                         "--sample_chars N, --temperature X)");
    }
  }
  if (cfg.d_model % cfg.heads != 0)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: --d_model " + std::to_string(cfg.d_model) + " is not a multiple of --heads " +
                                       std::to_string(cfg.heads));
  if (host != nullptr) m->host = *host;
  m->elem = dtype_bytes(m->host.compute_dtype);

  std::string source;
  if (!cfg.data.empty()) {
    m->text = read_file(cfg.data);
    source = cfg.data;
  } else {
    std::vector<std::string> names = fortune_files();
    for (const std::string& n : names) {
      std::vector<uint8_t> part = read_file(std::string(kFortunesDir) + "/" + n);
      m->text.insert(m->text.end(), part.begin(), part.end());
    }
    source = std::string(kFortunesDir) + " (" + std::to_string(names.size()) + " files)";
  }

  // Vocabulary and unigram statistics.
  int64_t counts[256] = {};
  for (uint8_t b : m->text) ++counts[b];
  std::fill(std::begin(m->byte_to_id), std::end(m->byte_to_id), -1);
  for (int b = 0; b < 256; ++b)
    if (counts[b] > 0) {
      m->byte_to_id[b] = static_cast<int32_t>(m->vocab.size());
      m->vocab.push_back(static_cast<uint8_t>(b));
    }
  const int64_t T = cfg.context;
  m->windows = static_cast<int64_t>(m->text.size()) / (T + 1);
  m->train_windows = m->windows * 9 / 10;
  if (m->train_windows < 1)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: " + source + " has " + std::to_string(m->text.size()) +
                                       " bytes, too few for one training window of context+1 = " +
                                       std::to_string(T + 1) + " bytes");
  if (m->host.rank == 0) {
    double bits = 0;
    for (int64_t c : counts)
      if (c > 0) {
        double p = static_cast<double>(c) / static_cast<double>(m->text.size());
        bits -= p * std::log2(p);
      }
    char line[512];
    std::snprintf(line, sizeof line,
                  "gpt: text %s: %zu bytes, vocabulary %zu, %lld train / %lld eval windows of %lld+1; unigram "
                  "entropy %.4f bits/char = %.4f nats/char (the loss is in nats)",
                  source.c_str(), m->text.size(), m->vocab.size(), static_cast<long long>(m->train_windows),
                  static_cast<long long>(m->windows - m->train_windows), static_cast<long long>(T), bits,
                  bits * std::log(2.0));
    m->log(line);
  }

  // Layers.
  const int64_t C = cfg.d_model, V = m->V(), H = cfg.heads;
  const int64_t e = static_cast<int64_t>(m->elem), f = 4;
  const float std0 = 0.02f, std_res = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  m->layers.resize(cfg.layers + 2);
  {
    LayerInfo& L = m->layers[0];
    L.name = "embed";
    add_param(L, "wte.weight", {V, C}, DSCPP_INIT_NORMAL, std0);
    add_param(L, "wpe.weight", {T, C}, DSCPP_INIT_NORMAL, std0);
    L.output_numel = T * C;
  }
  for (int64_t i = 0; i < cfg.layers; ++i) {
    LayerInfo& L = m->layers[1 + i];
    L.name = "blocks." + std::to_string(i);
    add_param(L, "ln_1.weight", {C}, DSCPP_INIT_ONES);
    add_param(L, "ln_1.bias", {C}, DSCPP_INIT_ZEROS);
    add_param(L, "attn.c_attn.weight", {3 * C, C}, DSCPP_INIT_NORMAL, std0);
    add_param(L, "attn.c_attn.bias", {3 * C}, DSCPP_INIT_ZEROS);
    add_param(L, "attn.c_proj.weight", {C, C}, DSCPP_INIT_NORMAL, std_res);
    add_param(L, "attn.c_proj.bias", {C}, DSCPP_INIT_ZEROS);
    add_param(L, "ln_2.weight", {C}, DSCPP_INIT_ONES);
    add_param(L, "ln_2.bias", {C}, DSCPP_INIT_ZEROS);
    add_param(L, "mlp.c_fc.weight", {4 * C, C}, DSCPP_INIT_NORMAL, std0);
    add_param(L, "mlp.c_fc.bias", {4 * C}, DSCPP_INIT_ZEROS);
    add_param(L, "mlp.c_proj.weight", {C, 4 * C}, DSCPP_INIT_NORMAL, std_res);
    add_param(L, "mlp.c_proj.bias", {C}, DSCPP_INIT_ZEROS);
    L.output_numel = T * C;
    // Order must match enum BlockSaved / BlockWork.
    L.saved.add(T * C * e);      // ln_1 output (input of c_attn, for its weight gradient)
    L.saved.add(T * f);          // ln_1 mean
    L.saved.add(T * f);          // ln_1 rstd
    L.saved.add(3 * T * C * e);  // qkv
    L.saved.add(H * T * T * e);  // attention probabilities
    L.saved.add(T * C * e);      // attention output (input of attn.c_proj)
    L.saved.add(T * C * e);      // h = x + attention (input of ln_2)
    L.saved.add(T * C * e);      // ln_2 output (input of mlp.c_fc)
    L.saved.add(T * f);          // ln_2 mean
    L.saved.add(T * f);          // ln_2 rstd
    L.saved.add(4 * T * C * e);  // pre-GELU activations (input of the GELU's backward)
    L.saved.add(4 * T * C * e);  // GELU output (input of mlp.c_proj, for its weight gradient)
    L.work.add(4 * T * C * e);   // d(fc)
    L.work.add(T * C * e);       // d(ln output)
    L.work.add(T * C * e);       // dh
    L.work.add(T * C * e);       // d(attention output)
    L.work.add(H * T * T * e);   // causal_attention_backward's scratch
    L.work.add(3 * T * C * e);   // dqkv
  }
  {
    LayerInfo& L = m->layers[cfg.layers + 1];
    L.name = "head";
    add_param(L, "ln_f.weight", {C}, DSCPP_INIT_ONES);
    add_param(L, "ln_f.bias", {C}, DSCPP_INIT_ZEROS);
    add_param(L, "lm_head.weight", {V, C}, DSCPP_INIT_NORMAL, std0);
    L.output_numel = T * V;
    L.saved.add(T * C * e);  // ln_f output
    L.saved.add(T * f);      // mean
    L.saved.add(T * f);      // rstd
    L.saved.add(T * V * e);  // softmax probabilities
    L.work.add(T * V * e);   // dlogits
    L.work.add(T * C * e);   // d(ln_f output)
  }
  for (LayerInfo& L : m->layers)
    for (size_t p = 0; p < L.params.size(); ++p) L.params[p].name = L.param_names[p].c_str();
  return m.release();
}

const LayerInfo& layer_at(const Gpt* m, int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(m->layers.size()))
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: layer index " + std::to_string(index) + " outside [0, " +
                                       std::to_string(m->layers.size()) + ")");
  return m->layers[index];
}

// ---- math helpers (all through the ops table) -------------------------------------------------
struct Ctx {
  const dscpp_ops* ops;
  size_t elem;
  // Element offset into a compute-dtype buffer.
  void* at(void* p, int64_t elems) const { return static_cast<char*>(p) + elems * static_cast<int64_t>(elem); }
  const void* at(const void* p, int64_t elems) const {
    return static_cast<const char*>(p) + elems * static_cast<int64_t>(elem);
  }

  // y[N,out] = x[N,in]·Wᵀ (+ b) (+ residual); gelu_out = gelu(y) when given.
  void linear_forward(const void* x, const void* W, const void* b, void* y, int64_t N, int64_t in, int64_t out,
                      const void* residual = nullptr, void* gelu_out = nullptr) const {
    op("linear_forward", ops->linear_forward, ops, x, W, b, residual, y, gelu_out, N, in, out);
  }
  // dW += dyᵀ·x, db += Σ dy, dx = dy·W (skipped when dx is null), taken through the GELU whose
  // input was gelu_pre when that is given.
  void linear_backward(const void* dy, const void* x, const void* W, void* dW, void* db, void* dx, int64_t N,
                       int64_t in, int64_t out, const void* gelu_pre = nullptr) const {
    op("linear_backward", ops->linear_backward, ops, dy, x, W, dW, db, dx, gelu_pre, N, in, out);
  }
};

const void* cp(void* p) { return p; }

void embed_forward(const Gpt* m, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const int64_t B = c->batch, T = m->T(), C = m->C();
  const int32_t* ids = static_cast<const int32_t*>(c->input);
  op("embedding_forward", ops->embedding_forward, ops, ids, c->params[0], c->output, B * T, m->V(), C);
  // wpe acts as a bias of length T·C over the batch's B rows.
  op("bias_add", ops->bias_add, ops, c->output, c->params[1], B, T * C);
}

void embed_backward(const Gpt* m, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const int64_t B = c->batch, T = m->T(), C = m->C();
  const int32_t* ids = static_cast<const int32_t*>(c->input);
  op("embedding_backward", ops->embedding_backward, ops, ids, c->grad_output, c->grads[0], B * T, m->V(), C);
  op("bias_grad", ops->bias_grad, ops, c->grad_output, c->grads[1], B, T * C);
}

void block_forward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), H = m->H(), hd = C / H, N = B * T;
  const void* const* p = c->params;
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  void* ln1 = S(kLn1Out);
  float* mean1 = static_cast<float*>(S(kLn1Mean));
  float* rstd1 = static_cast<float*>(S(kLn1Rstd));
  void* qkv = S(kQkv);
  void* probs = S(kProbs);
  void* att = S(kAtt);
  void* h1 = S(kH1);
  void* ln2 = S(kLn2Out);
  float* mean2 = static_cast<float*>(S(kLn2Mean));
  float* rstd2 = static_cast<float*>(S(kLn2Rstd));
  void* fc = S(kFc);
  void* gelu = S(kGelu);

  // Attention half.
  op("layernorm_forward", ops->layernorm_forward, ops, c->input, p[0], p[1], ln1, mean1, rstd1, N, C, kLnEps);
  k.linear_forward(ln1, p[2], p[3], qkv, N, C, 3 * C);
  op("causal_attention_forward", ops->causal_attention_forward, ops, cp(qkv), probs, att, B, T, H, hd,
     1.0f / std::sqrt(static_cast<float>(hd)));
  k.linear_forward(att, p[4], p[5], h1, N, C, C, c->input);  // h = x + proj(att)

  // MLP half.
  op("layernorm_forward", ops->layernorm_forward, ops, cp(h1), p[6], p[7], ln2, mean2, rstd2, N, C, kLnEps);
  k.linear_forward(ln2, p[8], p[9], fc, N, C, 4 * C, nullptr, gelu);
  k.linear_forward(gelu, p[10], p[11], c->output, N, 4 * C, C, h1);  // y = h + proj(gelu)
}

void block_backward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), H = m->H(), hd = C / H, N = B * T;
  const void* const* p = c->params;
  void* const* g = c->grads;
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  auto W = [&](int i) { return L.work.at(c->workspace, i, B); };
  const void* dy = c->grad_output;
  void* dfc = W(kWDfc);
  void* dln = W(kWDln);
  void* dh = W(kWDh1);
  void* datt = W(kWDatt);
  void* dqkv = W(kWDqkv);
  const void* qkv = S(kQkv);
  const void* probs = S(kProbs);

  // MLP half: y = h + c_proj(gelu(c_fc(ln_2(h)))).
  k.linear_backward(dy, S(kGelu), p[10], g[10], g[11], dfc, N, 4 * C, C, S(kFc));  // dfc through the GELU
  k.linear_backward(dfc, S(kLn2Out), p[8], g[8], g[9], dln, N, C, 4 * C);
  op("layernorm_backward", ops->layernorm_backward, ops, cp(dln), cp(S(kH1)), p[6],
     static_cast<const float*>(S(kLn2Mean)), static_cast<const float*>(S(kLn2Rstd)), dh, g[6], g[7], N, C);
  op("axpy", ops->axpy, ops, 1.0f, dy, dh, N * C);  // residual

  // Attention half: h = x + c_proj(attention(c_attn(ln_1(x)))).
  k.linear_backward(dh, S(kAtt), p[4], g[4], g[5], datt, N, C, C);
  op("causal_attention_backward", ops->causal_attention_backward, ops, qkv, probs, cp(datt), dqkv, W(kWAttn), B, T, H,
     hd, 1.0f / std::sqrt(static_cast<float>(hd)));
  k.linear_backward(dqkv, S(kLn1Out), p[2], g[2], g[3], dln, N, C, 3 * C);
  if (c->grad_input != nullptr) {
    op("layernorm_backward", ops->layernorm_backward, ops, cp(dln), c->input, p[0],
       static_cast<const float*>(S(kLn1Mean)), static_cast<const float*>(S(kLn1Rstd)), c->grad_input, g[0], g[1], N,
       C);
    op("axpy", ops->axpy, ops, 1.0f, cp(dh), c->grad_input, N * C);  // residual
  } else {
    // Still owe ln_1's parameter gradients; dx goes to scratch (datt is free now).
    op("layernorm_backward", ops->layernorm_backward, ops, cp(dln), c->input, p[0],
       static_cast<const float*>(S(kLn1Mean)), static_cast<const float*>(S(kLn1Rstd)), datt, g[0], g[1], N, C);
  }
}

void head_forward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), V = m->V(), N = B * T;
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  op("layernorm_forward", ops->layernorm_forward, ops, c->input, c->params[0], c->params[1], S(kLnfOut),
     static_cast<float*>(S(kLnfMean)), static_cast<float*>(S(kLnfRstd)), N, C, kLnEps);
  k.linear_forward(S(kLnfOut), c->params[2], nullptr, c->output, N, C, V);
  if (c->target == nullptr) return;  // predicting only
  double loss_sum = 0;
  int64_t counted = 0, correct = 0;
  op("cross_entropy_forward", ops->cross_entropy_forward, ops, cp(c->output), c->target, S(kLogitProbs), N, V,
     &loss_sum, &counted, &correct);
  if (c->metrics != nullptr) {
    c->metrics->loss_sum += loss_sum;
    c->metrics->counted += counted;
    c->metrics->correct += correct;
  }
}

void head_backward(const Gpt* m, const LayerInfo& L, const dscpp_layer_ctx* c) {
  const dscpp_ops* ops = c->ops;
  const Ctx k{ops, m->elem};
  const int64_t B = c->batch, T = m->T(), C = m->C(), V = m->V(), N = B * T;
  if (c->target == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "gpt: head backward without targets");
  auto S = [&](int i) { return L.saved.at(c->saved, i, B); };
  void* dlogits = L.work.at(c->workspace, kWDlogits, B);
  void* dlnf = L.work.at(c->workspace, kWDlnf, B);
  // The objective is the mean over all B·T positions (every target is a real token).
  op("cross_entropy_backward", ops->cross_entropy_backward, ops, cp(S(kLogitProbs)), c->target, dlogits, N, V,
     c->loss_grad / static_cast<float>(N));
  k.linear_backward(dlogits, S(kLnfOut), c->params[2], c->grads[2], nullptr, dlnf, N, C, V);
  if (c->grad_input == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "gpt: head backward without grad_input (it is never layer 0)");
  op("layernorm_backward", ops->layernorm_backward, ops, cp(dlnf), c->input, c->params[0],
     static_cast<const float*>(S(kLnfMean)), static_cast<const float*>(S(kLnfRstd)), c->grad_input, c->grads[0],
     c->grads[1], N, C);
}

// ---- report: generate text through the lent forward pass -----------------------------------
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch == '\t' || (ch >= 0x20 && ch < 0x7f)) {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out;
}

void report(const Gpt* m, const dscpp_infer* infer) {
  const Config& cfg = m->cfg;
  if (cfg.sample_chars == 0 || infer == nullptr || infer->forward == nullptr || infer->max_batch < 1) return;
  const int64_t T = m->T(), V = m->V();
  // Prompt: the first window of the eval split (the last training window when eval is empty).
  const int64_t w = m->windows > m->train_windows ? m->train_windows : m->train_windows - 1;
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = m->byte_to_id[m->text[w * (T + 1) + t]];
  std::vector<float> logits(T * V);
  std::mt19937_64 rng(m->host.seed ^ 0x9e3779b97f4a7c15ull);
  std::string generated;
  for (int64_t n = 0; n < cfg.sample_chars; ++n) {
    dscpp_error err{};
    int status = infer->forward(infer, ids.data(), 1, logits.data(), &err);
    if (status != DSCPP_OK) fail(status, std::string("gpt: report's forward pass failed: ") + err.message);
    const float* last = logits.data() + (T - 1) * V;
    int32_t next = 0;
    if (cfg.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    } else {
      std::vector<double> w(V);
      const float mx = *std::max_element(last, last + V);
      for (int64_t v = 0; v < V; ++v) w[v] = std::exp((last[v] - mx) / cfg.temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int64_t>(w.begin(), w.end())(rng));
    }
    generated += static_cast<char>(m->vocab[next]);
    std::rotate(ids.begin(), ids.begin() + 1, ids.end());
    ids[T - 1] = next;
  }
  std::string prompt(m->text.begin() + w * (T + 1), m->text.begin() + w * (T + 1) + T);
  size_t cut = prompt.rfind('\n', prompt.size() >= 2 ? prompt.size() - 2 : 0);
  std::string tail = cut == std::string::npos ? prompt : prompt.substr(cut + 1);
  m->log(std::string("gpt: ") + (cfg.temperature > 0 ? "sampled" : "greedy") + " continuation of eval window " +
         std::to_string(w - m->train_windows) + " (" + std::to_string(cfg.sample_chars) + " chars after '" +
         printable(tail) + "'):");
  size_t at = 0;
  while (at <= generated.size()) {
    size_t nl = generated.find('\n', at);
    if (nl == std::string::npos) nl = generated.size();
    m->log("gpt: | " + printable(generated.substr(at, nl - at)));
    at = nl + 1;
  }
}

// ---- the C entry points ----------------------------------------------------------------------
int api_create(int argc, const char* const* argv, const dscpp_host_info* host, void** model, dscpp_error* err) {
  return guarded(err, [&] {
    if (model == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "gpt: create without a model pointer");
    *model = create_model(argc, argv, host);
  });
}

void api_destroy(void* model) { delete static_cast<Gpt*>(model); }

int api_describe(void* model, dscpp_model_desc* out, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    *out = dscpp_model_desc{};
    out->num_layers = static_cast<int32_t>(m->layers.size());
    out->data.train_size = m->train_windows;
    out->data.eval_size = m->windows - m->train_windows;
    out->data.input_dtype = DSCPP_I32;
    out->data.input_numel = m->T();
    out->data.target_dtype = DSCPP_I32;
    out->data.target_numel = m->T();
    out->data.tokens_per_sample = m->T();
  });
}

int api_layer(void* model, int32_t index, dscpp_layer_desc* out, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    const LayerInfo& L = layer_at(m, index);
    *out = dscpp_layer_desc{};
    out->name = L.name.c_str();
    out->num_params = static_cast<int32_t>(L.params.size());
    out->params = L.params.data();
    out->output_numel = L.output_numel;
    out->saved_bytes = L.saved.total();
    out->workspace_bytes = L.work.total();
  });
}

int api_forward(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    const LayerInfo& L = layer_at(m, layer);
    if (layer == 0) embed_forward(m, ctx);
    else if (layer + 1 == static_cast<int32_t>(m->layers.size())) head_forward(m, L, ctx);
    else block_forward(m, L, ctx);
  });
}

int api_backward(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    const LayerInfo& L = layer_at(m, layer);
    if (layer == 0) embed_backward(m, ctx);
    else if (layer + 1 == static_cast<int32_t>(m->layers.size())) head_backward(m, L, ctx);
    else block_backward(m, L, ctx);
  });
}

int api_load_sample(void* model, int32_t split, int64_t index, void* input, int32_t* target, dscpp_error* err) {
  return guarded(err, [&] {
    const Gpt* m = static_cast<const Gpt*>(model);
    if (split != 0 && split != 1)
      fail(DSCPP_E_INVALID_ARGUMENT, "gpt: split " + std::to_string(split) + " is neither 0 (train) nor 1 (eval)");
    const int64_t size = split == 0 ? m->train_windows : m->windows - m->train_windows;
    if (index < 0 || index >= size)
      fail(DSCPP_E_INVALID_ARGUMENT, std::string("gpt: ") + (split == 0 ? "train" : "eval") + " sample " +
                                         std::to_string(index) + " outside [0, " + std::to_string(size) + ")");
    const int64_t T = m->T();
    const uint8_t* w = m->text.data() + (split == 0 ? index : m->train_windows + index) * (T + 1);
    int32_t* x = static_cast<int32_t*>(input);
    for (int64_t t = 0; t < T; ++t) {
      x[t] = m->byte_to_id[w[t]];
      target[t] = m->byte_to_id[w[t + 1]];
    }
  });
}

int api_report(void* model, const dscpp_infer* infer, dscpp_error* err) {
  return guarded(err, [&] { report(static_cast<const Gpt*>(model), infer); });
}

dscpp_model_api make_api() {
  dscpp_model_api api{};
  dscpp_model_api_stamp(&api);
  api.name = "gpt";
  api.create = api_create;
  api.destroy = api_destroy;
  api.describe = api_describe;
  api.layer = api_layer;
  api.forward = api_forward;
  api.backward = api_backward;
  api.load_sample = api_load_sample;
  api.report = api_report;
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const dscpp_model_api* dscpp_model_entry(void) {
  static const dscpp_model_api api = make_api();
  return &api;
}
