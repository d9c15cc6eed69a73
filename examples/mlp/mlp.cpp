// Example model plugin: a multi-layer perceptron on Fashion-MNIST.
//
// Written only against the plugin ABI (include/dscpp/model.h), libc/libstdc++ and zlib, so the
// directory can be copied out of the tree and built on its own:
//   c++ -std=c++20 -O2 -shared -fPIC -I<dscpp>/include mlp.cpp -lz -o libmlp.so
//
// Layers: "fc1" … "fcK" (linear + ReLU, one per --hidden entry) and "head" (linear + softmax
// cross-entropy, the loss layer). A linear layer's weight is stored [out, in] like
// torch.nn.Linear, so y = x·Wᵀ + b.
//
// Plugin arguments (after `--`):
//   --data DIR       directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
//                    (default /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)
//   --hidden N[,N…]  hidden layer widths (default 256,128; "" for none: logistic regression)
//   --limit N        use only the first N training samples (default: all 60000)
// Inputs: 784 fp32 pixels, (p/255 − 0.2860)/0.3530 (the Fashion-MNIST train mean/std); fc1 sees
// them in the compute dtype (the runtime casts a float input for layer 0).
// Targets: one int32 class label. Eval split: t10k.
#include "dscpp/model.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {

// ---- errors -------------------------------------------------------------------------------
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void fail(int code, std::string message) { throw Failure{code, std::move(message)}; }

void set_error(dscpp_error* err, const std::string& message) {
  if (err != nullptr) std::snprintf(err->message, DSCPP_ERROR_CAP, "%s", message.c_str());
}

// Runs `body`, turning exceptions into a status and a message (nothing may unwind into C).
template <class Body>
int guarded(dscpp_error* err, Body&& body) {
  try {
    body();
    return DSCPP_OK;
  } catch (const Failure& f) {
    set_error(err, f.message);
    return f.code;
  } catch (const std::bad_alloc&) {
    set_error(err, "mlp: out of host memory");
    return DSCPP_E_INTERNAL;
  } catch (const std::exception& e) {
    set_error(err, std::string("mlp: ") + e.what());
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

// ---- data -----------------------------------------------------------------------------------
constexpr int kClasses = 10;
constexpr int64_t kPixels = 28 * 28;
constexpr float kMean = 0.2860f, kStd = 0.3530f;
const char* const kClassNames[kClasses] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                           "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(DSCPP_E_IO, path + ": cannot open: " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int zerr = 0;
      std::string what = gzerror(file, &zerr);
      gzclose(file);
      fail(DSCPP_E_IO, path + ": not a readable gzip stream: " + what);
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(file);
  return bytes;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) | uint32_t(b[at + 3]);
}

struct Split {
  std::vector<uint8_t> images;  // n × 784, IDX header stripped
  std::vector<uint8_t> labels;  // n
  int64_t size = 0;
};

// Reads one split's IDX pair and checks everything the format promises.
Split read_split(const std::string& dir, const std::string& prefix) {
  const std::string ipath = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string lpath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> images = read_gzip(ipath);
  char buf[256];
  if (images.size() < 16)
    fail(DSCPP_E_IO, ipath + ": " + std::to_string(images.size()) + " bytes, shorter than the 16-byte IDX3 header");
  if (be32(images, 0) != 0x00000803) {
    std::snprintf(buf, sizeof buf, ": magic number 0x%08x, expected 0x00000803 (IDX3 unsigned bytes)", be32(images, 0));
    fail(DSCPP_E_IO, ipath + buf);
  }
  const uint32_t n = be32(images, 4), rows = be32(images, 8), cols = be32(images, 12);
  if (rows != 28 || cols != 28) {
    std::snprintf(buf, sizeof buf, ": images are %ux%u, expected 28x28", rows, cols);
    fail(DSCPP_E_IO, ipath + buf);
  }
  if (images.size() != 16 + size_t(n) * kPixels) {
    std::snprintf(buf, sizeof buf, ": header says %u images (%zu bytes) but the file holds %zu bytes", n,
                  16 + size_t(n) * kPixels, images.size());
    fail(DSCPP_E_IO, ipath + buf);
  }
  std::vector<uint8_t> labels = read_gzip(lpath);
  if (labels.size() < 8)
    fail(DSCPP_E_IO, lpath + ": " + std::to_string(labels.size()) + " bytes, shorter than the 8-byte IDX1 header");
  if (be32(labels, 0) != 0x00000801) {
    std::snprintf(buf, sizeof buf, ": magic number 0x%08x, expected 0x00000801 (IDX1 unsigned bytes)", be32(labels, 0));
    fail(DSCPP_E_IO, lpath + buf);
  }
  if (be32(labels, 4) != n) {
    std::snprintf(buf, sizeof buf, ": %u labels but %s holds %u images", be32(labels, 4), ipath.c_str(), n);
    fail(DSCPP_E_IO, lpath + buf);
  }
  if (labels.size() != 8 + size_t(n)) {
    std::snprintf(buf, sizeof buf, ": header says %u labels but the file holds %zu bytes", n, labels.size());
    fail(DSCPP_E_IO, lpath + buf);
  }
  for (uint32_t i = 0; i < n; ++i)
    if (labels[8 + i] >= kClasses) {
      std::snprintf(buf, sizeof buf, ": label %u of sample %u is not a class in [0, %d)", labels[8 + i], i, kClasses);
      fail(DSCPP_E_IO, lpath + buf);
    }
  Split s;
  s.size = n;
  s.images.assign(images.begin() + 16, images.end());
  s.labels.assign(labels.begin() + 8, labels.end());
  return s;
}

// ---- model --------------------------------------------------------------------------------
struct Linear {
  std::string name;
  int64_t in = 0, out = 0;
  bool loss = false;  // the head: softmax cross-entropy instead of ReLU
  dscpp_param_desc params[2]{};
};

struct Mlp {
  std::vector<Linear> layers;
  Split train, eval;
  int64_t train_size = 0;
  size_t elem = 4;  // bytes of one compute-dtype element
  dscpp_host_info host{};
};

size_t dtype_bytes(dscpp_dtype d) { return d == DSCPP_F16 || d == DSCPP_BF16 ? 2 : 4; }

int64_t parse_int(const std::string& key, const std::string& v, int64_t lo) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo)
    fail(DSCPP_E_INVALID_ARGUMENT, "mlp: " + key + " wants an integer ≥ " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

Mlp* create_model(int argc, const char* const* argv, const dscpp_host_info* host) {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string hidden = "256,128";
  int64_t limit = -1;
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i], value;
    size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
    } else if (key == "--data" || key == "--hidden" || key == "--limit") {
      if (i + 1 >= argc) fail(DSCPP_E_INVALID_ARGUMENT, "mlp: " + key + " needs a value");
      value = argv[++i];
    }
    if (key == "--data") data = value;
    else if (key == "--hidden") hidden = value;
    else if (key == "--limit") limit = parse_int(key, value, 1);
    else fail(DSCPP_E_INVALID_ARGUMENT, "mlp: unknown argument '" + std::string(argv[i]) +
                                            "' (accepted: --data DIR, --hidden N[,N...], --limit N)");
  }
  std::vector<int64_t> widths;
  for (size_t at = 0; at < hidden.size();) {
    size_t comma = hidden.find(',', at);
    if (comma == std::string::npos) comma = hidden.size();
    widths.push_back(parse_int("--hidden", hidden.substr(at, comma - at), 1));
    at = comma + 1;
  }

  auto m = std::make_unique<Mlp>();
  if (host != nullptr) m->host = *host;
  m->elem = dtype_bytes(m->host.compute_dtype);
  m->train = read_split(data, "train");
  m->eval = read_split(data, "t10k");
  m->train_size = limit > 0 && limit < m->train.size ? limit : m->train.size;

  int64_t in = kPixels;
  widths.push_back(kClasses);
  m->layers.resize(widths.size());
  for (size_t l = 0; l < widths.size(); ++l) {
    Linear& L = m->layers[l];
    L.loss = l + 1 == widths.size();
    L.name = L.loss ? "head" : "fc" + std::to_string(l + 1);
    L.in = in;
    L.out = widths[l];
    // torch.nn.Linear's default: U(−1/√fan_in, 1/√fan_in) for the weight; biases start at zero.
    L.params[0] = dscpp_param_desc{"weight", 2, {L.out, L.in, 0, 0}, DSCPP_INIT_UNIFORM,
                                   1.0f / std::sqrt(static_cast<float>(L.in)), nullptr, nullptr, 0,
                                   DSCPP_ROLE_WEIGHT, 0, 0};
    L.params[1] = dscpp_param_desc{"bias", 1, {L.out, 0, 0, 0}, DSCPP_INIT_ZEROS, 0.0f, nullptr, nullptr, 0,
                                   DSCPP_ROLE_BIAS, 0, 0};
    in = L.out;
  }
  if (m->host.log != nullptr && m->host.rank == 0) {
    std::string line = "mlp: Fashion-MNIST from " + data + ": " + std::to_string(m->train_size) + " train / " +
                       std::to_string(m->eval.size) + " eval samples; layers 784";
    for (const Linear& L : m->layers) line += "→" + std::to_string(L.out);
    m->host.log(m->host.runtime, line.c_str());
  }
  return m.release();
}

const Linear& layer_at(const Mlp* m, int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(m->layers.size()))
    fail(DSCPP_E_INVALID_ARGUMENT, "mlp: layer index " + std::to_string(index) + " outside [0, " +
                                       std::to_string(m->layers.size()) + ")");
  return m->layers[index];
}

// Forward: z = x·Wᵀ + b. Hidden layers keep z in `saved` (ReLU backward needs its sign) and
// output relu(z); the head outputs the logits and keeps the softmax probabilities in `saved`.
void forward(const Mlp* m, int32_t index, const dscpp_layer_ctx* c) {
  const Linear& L = layer_at(m, index);
  const dscpp_ops* ops = c->ops;
  const int64_t B = c->batch;
  void* z = L.loss ? c->output : c->saved;
  op("gemm", ops->gemm, ops, DSCPP_NO_TRANS, DSCPP_TRANS, B, L.out, L.in, 1.0f, c->input, L.in, c->params[0], L.in,
     0.0f, z, L.out);
  op("bias_add", ops->bias_add, ops, z, c->params[1], B, L.out);
  if (!L.loss) {
    op("relu_forward", ops->relu_forward, ops, static_cast<const void*>(z), c->output, B * L.out);
    return;
  }
  if (c->target == nullptr) return;  // predicting only
  double loss_sum = 0;
  int64_t counted = 0, correct = 0;
  op("cross_entropy_forward", ops->cross_entropy_forward, ops, static_cast<const void*>(c->output), c->target,
     c->saved, B, static_cast<int64_t>(kClasses), &loss_sum, &counted, &correct);
  if (c->metrics != nullptr) {
    c->metrics->loss_sum += loss_sum;
    c->metrics->counted += counted;
    c->metrics->correct += correct;
  }
}

void backward(const Mlp* m, int32_t index, const dscpp_layer_ctx* c) {
  const Linear& L = layer_at(m, index);
  const dscpp_ops* ops = c->ops;
  const int64_t B = c->batch;
  void* dz = c->workspace;  // B × out
  if (L.loss) {
    if (c->target == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "mlp: head backward without targets");
    // The objective is the mean over the micro-batch's rows; every label is a valid class, so
    // all B rows count.
    op("cross_entropy_backward", ops->cross_entropy_backward, ops, static_cast<const void*>(c->saved), c->target, dz,
       B, static_cast<int64_t>(kClasses), c->loss_grad / static_cast<float>(B));
  } else {
    op("relu_backward", ops->relu_backward, ops, static_cast<const void*>(c->saved), c->grad_output, dz, B * L.out);
  }
  // dW += dzᵀ·x, db += Σ_rows dz (accumulate), dx = dz·W (overwrite).
  op("gemm", ops->gemm, ops, DSCPP_TRANS, DSCPP_NO_TRANS, L.out, L.in, B, 1.0f, static_cast<const void*>(dz), L.out,
     c->input, L.in, 1.0f, c->grads[0], L.in);
  op("bias_grad", ops->bias_grad, ops, static_cast<const void*>(dz), c->grads[1], B, L.out);
  if (c->grad_input != nullptr)
    op("gemm", ops->gemm, ops, DSCPP_NO_TRANS, DSCPP_NO_TRANS, B, L.in, L.out, 1.0f, static_cast<const void*>(dz),
       L.out, c->params[0], L.in, 0.0f, c->grad_input, L.in);
}

// After evaluation: classify the first few eval images through the lent forward pass.
void report(const Mlp* m, const dscpp_infer* infer) {
  if (infer == nullptr || infer->forward == nullptr || m->host.log == nullptr) return;
  const int64_t n = std::min<int64_t>({8, infer->max_batch, m->eval.size});
  if (n <= 0) return;
  std::vector<float> inputs(n * kPixels), logits(n * kClasses);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < kPixels; ++p)
      inputs[i * kPixels + p] = (m->eval.images[i * kPixels + p] / 255.0f - kMean) / kStd;
  dscpp_error err{};
  int status = infer->forward(infer, inputs.data(), n, logits.data(), &err);
  if (status != DSCPP_OK) fail(status, std::string("mlp: report's forward pass failed: ") + err.message);
  int right = 0;
  std::string line = "mlp: first eval images:";
  for (int64_t i = 0; i < n; ++i) {
    int best = 0;
    for (int k = 1; k < kClasses; ++k)
      if (logits[i * kClasses + k] > logits[i * kClasses + best]) best = k;
    int truth = m->eval.labels[i];
    right += best == truth;
    line +=
        std::string(" [") + kClassNames[best] + (best == truth ? "" : std::string(" ≠ ") + kClassNames[truth]) + "]";
  }
  line += " (" + std::to_string(right) + "/" + std::to_string(n) + " right)";
  m->host.log(m->host.runtime, line.c_str());
}

// ---- the C entry points ----------------------------------------------------------------------
int api_create(int argc, const char* const* argv, const dscpp_host_info* host, void** model, dscpp_error* err) {
  return guarded(err, [&] {
    if (model == nullptr) fail(DSCPP_E_INVALID_ARGUMENT, "mlp: create without a model pointer");
    *model = create_model(argc, argv, host);
  });
}

void api_destroy(void* model) { delete static_cast<Mlp*>(model); }

int api_describe(void* model, dscpp_model_desc* out, dscpp_error* err) {
  return guarded(err, [&] {
    const Mlp* m = static_cast<const Mlp*>(model);
    *out = dscpp_model_desc{};
    out->num_layers = static_cast<int32_t>(m->layers.size());
    out->data.train_size = m->train_size;
    out->data.eval_size = m->eval.size;
    out->data.input_dtype = DSCPP_F32;
    out->data.input_numel = kPixels;
    out->data.target_dtype = DSCPP_I32;
    out->data.target_numel = 1;
    out->data.tokens_per_sample = 0;
  });
}

int api_layer(void* model, int32_t index, dscpp_layer_desc* out, dscpp_error* err) {
  return guarded(err, [&] {
    const Mlp* m = static_cast<const Mlp*>(model);
    const Linear& L = layer_at(m, index);
    *out = dscpp_layer_desc{};
    out->name = L.name.c_str();
    out->num_params = 2;
    out->params = L.params;
    out->output_numel = L.out;
    // Hidden: z (B × out) for ReLU backward. Head: softmax probabilities (B × 10).
    out->saved_bytes = static_cast<int64_t>(L.out * m->elem);
    out->workspace_bytes = static_cast<int64_t>(L.out * m->elem);  // dz in backward
  });
}

int api_forward(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] { forward(static_cast<const Mlp*>(model), layer, ctx); });
}

int api_backward(void* model, int32_t layer, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  return guarded(err, [&] { backward(static_cast<const Mlp*>(model), layer, ctx); });
}

int api_load_sample(void* model, int32_t split, int64_t index, void* input, int32_t* target, dscpp_error* err) {
  return guarded(err, [&] {
    const Mlp* m = static_cast<const Mlp*>(model);
    if (split != 0 && split != 1)
      fail(DSCPP_E_INVALID_ARGUMENT, "mlp: split " + std::to_string(split) + " is neither 0 (train) nor 1 (eval)");
    const Split& s = split == 0 ? m->train : m->eval;
    const int64_t size = split == 0 ? m->train_size : m->eval.size;
    if (index < 0 || index >= size)
      fail(DSCPP_E_INVALID_ARGUMENT, std::string("mlp: ") + (split == 0 ? "train" : "eval") + " sample " +
                                         std::to_string(index) + " outside [0, " + std::to_string(size) + ")");
    float* x = static_cast<float*>(input);
    const uint8_t* pixels = s.images.data() + index * kPixels;
    for (int64_t p = 0; p < kPixels; ++p) x[p] = (pixels[p] / 255.0f - kMean) / kStd;
    target[0] = s.labels[index];
  });
}

int api_report(void* model, const dscpp_infer* infer, dscpp_error* err) {
  return guarded(err, [&] { report(static_cast<const Mlp*>(model), infer); });
}

dscpp_model_api make_api() {
  dscpp_model_api api{};
  dscpp_model_api_stamp(&api);
  api.name = "mlp";
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
