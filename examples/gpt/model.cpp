// Building the model from the plugin arguments: parsing and checking them, then handing off to the
// text (data.cpp) and the layer list (layers.cpp) in that order, since the layers' shapes need the
// vocabulary the text defines.
#include "gpt.h"

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>

namespace gpt {
namespace {

size_t dtype_bytes(dscpp_dtype d) { return d == DSCPP_F16 || d == DSCPP_BF16 ? 2 : 4; }

int64_t parse_int(const std::string& key, const std::string& v, int64_t lo) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: " + key + " wants an integer ≥ " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

void parse_args(Config& cfg, int argc, const char* const* argv) {
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
    else if (key == "--tokens") cfg.tokens = value;
    else if (key == "--vocab_size") cfg.vocab_size = parse_int(key, value, 1);
    else if (key == "--token_bytes") cfg.token_bytes = parse_int(key, value, 2);
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
                                         "' (accepted: --data FILE, --tokens FILE --vocab_size N [--token_bytes 2|4], "
                                         "--layers N, --d_model N, --heads N, --context N, --sample_chars N, "
                                         "--temperature X)");
    }
  }
  if (!cfg.tokens.empty() && !cfg.data.empty())
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: --data (text) and --tokens (a token file) exclude each other");
  if (!cfg.tokens.empty() && cfg.vocab_size <= 0)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: --tokens needs --vocab_size (every token id must be below it)");
  if (cfg.d_model % cfg.heads != 0)
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: --d_model " + std::to_string(cfg.d_model) + " is not a multiple of --heads " +
                                       std::to_string(cfg.heads));
}

}  // namespace

Gpt* create_model(int argc, const char* const* argv, const dscpp_host_info* host) {
  auto m = std::make_unique<Gpt>();
  parse_args(m->cfg, argc, argv);
  if (host != nullptr) m->host = *host;
  m->elem = dtype_bytes(m->host.compute_dtype);
  load_text(*m);
  declare_layers(*m);
  return m.release();
}

const LayerInfo& layer_at(const Gpt* m, int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(m->layers.size()))
    fail(DSCPP_E_INVALID_ARGUMENT, "gpt: layer index " + std::to_string(index) + " outside [0, " +
                                       std::to_string(m->layers.size()) + ")");
  return m->layers[index];
}

}  // namespace gpt
