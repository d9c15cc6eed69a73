#include "causal_lm.h"
#include "lora_config.h"
#include "sft_data.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace dscpp::models {

using layers::fail;

// ---- Args ---------------------------------------------------------------------------------------

Args::Args(const std::string& family, const std::vector<std::string>& args, const std::vector<std::string>& flags)
    : family_(family) {
  for (size_t i = 1; i < args.size(); ++i) {
    std::string key = args[i], value;
    if (key.rfind("--", 0) != 0)
      fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": expected an --option, found '" + key + "'");
    if (const size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
    } else if (std::find(flags.begin(), flags.end(), key) != flags.end()) {
      value = "1";
    } else {
      if (i + 1 >= args.size()) fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": " + key + " needs a value");
      value = args[++i];
    }
    if (values_.count(key)) fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": " + key + " is given twice");
    values_[key] = value;
    used_[key] = false;
  }
}

bool Args::has(const std::string& key) {
  if (!values_.count(key)) return false;
  used_[key] = true;
  return true;
}

std::string Args::text(const std::string& key, const std::string& fallback) {
  return has(key) ? values_[key] : fallback;
}

int64_t Args::integer(const std::string& key, int64_t fallback, int64_t lo) {
  if (!has(key)) return fallback;
  const std::string& v = values_[key];
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo)
    fail(DSCPP_E_INVALID_ARGUMENT,
         family_ + ": " + key + " wants an integer ≥ " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

void Args::finish() const {
  for (const auto& [key, used] : used_)
    if (!used) fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": unknown argument " + key);
}

// ---- HfConfig -------------------------------------------------------------------------------------

HfConfig::HfConfig(const std::string& path) : path_(path) {
  std::ifstream in(path);
  if (!in) fail(DSCPP_E_IO, path + ": cannot open: " + std::strerror(errno));
  std::stringstream s;
  s << in.rdbuf();
  text_ = s.str();
  try {
    json_ = nlohmann::json::parse(text_);
  } catch (const nlohmann::json::exception& e) {
    fail(DSCPP_E_IO, path + ": not JSON: " + e.what());
  }
  if (!json_.is_object()) fail(DSCPP_E_IO, path + ": expected a JSON object, found " + json_.type_name());
}

void HfConfig::bad(const std::string& key, const std::string& what) const {
  auto it = json_.find(key);
  fail(DSCPP_E_INVALID_ARGUMENT,
       path_ + ": \"" + key + "\": expected " + what + ", found " + (it == json_.end() ? "nothing" : it->dump()));
}

bool HfConfig::has(const std::string& key) const {
  auto it = json_.find(key);
  return it != json_.end() && !it->is_null();
}

int64_t HfConfig::integer(const std::string& key) const {
  if (!has(key) || !json_[key].is_number_integer()) bad(key, "an integer");
  return json_[key].get<int64_t>();
}

int64_t HfConfig::integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

double HfConfig::number(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  if (!json_[key].is_number()) bad(key, "a number");
  return json_[key].get<double>();
}

bool HfConfig::boolean(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!json_[key].is_boolean()) bad(key, "true or false");
  return json_[key].get<bool>();
}

std::string HfConfig::string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!json_[key].is_string()) bad(key, "a string");
  return json_[key].get<std::string>();
}

// ---- TokenWindows -----------------------------------------------------------------------------------

TokenWindows::TokenWindows(const std::string& family, const std::string& train, const std::string& eval,
                           int token_bytes, int64_t vocab, int64_t context, const Documents& docs)
    : family_(family), context_(context), docs_(docs) {
  const bool doc_windows = docs.windows;
  try {
    train_ = std::make_unique<examples::TokenFile>(train, token_bytes, vocab);
    if (!eval.empty()) eval_ = std::make_unique<examples::TokenFile>(eval, token_bytes, vocab);
  } catch (const std::runtime_error& e) {
    fail(DSCPP_E_IO, family_ + ": " + e.what());
  }
  if (doc_windows) {
    train_windows_ = document_windows(*train_);
    if (eval_) eval_windows_ = document_windows(*eval_);
  }
  const int64_t windows = doc_windows ? int64_t(train_windows_.size()) : train_->size() / (context + 1);
  if (eval_) {
    train_size_ = windows;
    eval_size_ = doc_windows ? int64_t(eval_windows_.size()) : eval_->size() / (context + 1);
  } else {
    train_size_ = windows * 9 / 10;
    eval_size_ = windows - train_size_;
    eval_first_ = train_size_;
  }
  if (train_size_ < 1)
    fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": " + train + " has " + std::to_string(train_->size()) +
                                       " tokens, too few for one training window of context+1 = " +
                                       std::to_string(context + 1));
}

// Each document (ending at an end-of-document token, or at the end of the file) cut from its
// start into windows of context+1 tokens that overlap by one (a window's last token is the
// next one's first input); a document of one token has nothing to predict and gives none.
std::vector<TokenWindows::Window> TokenWindows::document_windows(const examples::TokenFile& f) const {
  std::vector<Window> out;
  int64_t doc = 0;
  for (int64_t i = 0; i < f.size(); ++i) {
    if (static_cast<int64_t>(f.at(i)) != docs_.eod && i + 1 < f.size()) continue;
    const int64_t end = i + 1;  // the document is [doc, end), its end token included
    for (int64_t s = doc; end - s >= 2; s += context_) out.push_back({s, std::min(context_ + 1, end - s)});
    doc = end;
  }
  return out;
}

void TokenWindows::load(int32_t split, int64_t index, void* input, int32_t* target) const {
  if (split != 0 && split != 1)
    fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": split " + std::to_string(split) + " is neither 0 (train) nor 1 (eval)");
  const int64_t size = split == 0 ? train_size_ : eval_size_;
  if (index < 0 || index >= size)
    fail(DSCPP_E_INVALID_ARGUMENT,
         family_ + ": sample " + std::to_string(index) + " of a split of " + std::to_string(size));
  const examples::TokenFile& f = split == 1 && eval_ ? *eval_ : *train_;
  const int64_t w = (split == 1 ? eval_first_ : 0) + index;
  Window win{w * (context_ + 1), context_ + 1};
  if (!train_windows_.empty()) win = (split == 1 && eval_ ? eval_windows_ : train_windows_)[size_t(w)];
  auto* x = static_cast<int32_t*>(input);
  const auto eod = static_cast<int32_t>(docs_.eod);
  for (int64_t t = 0; t < context_; ++t) {
    if (t + 1 >= win.length) {  // padding after the document: never attended by a real token, no loss
      x[t] = eod;
      target[t] = -1;
      continue;
    }
    x[t] = static_cast<int32_t>(f.at(win.start + t));
    target[t] = docs_.mask_loss && x[t] == eod ? -1 : static_cast<int32_t>(f.at(win.start + t + 1));
  }
  if (!docs_.packed()) return;
  // Positions and first keys (layers::TokenPart): a document starts after each eod token; a
  // sliding window hides keys more than window − 1 back.
  int32_t* position = x + context_;
  int32_t* first_key = x + 2 * context_;
  int32_t start = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(context_); ++t) {
    position[t] = docs_.reset_positions ? t - start : t;
    first_key[t] = docs_.reset_attention ? start : 0;
    if (docs_.window > 0) first_key[t] = std::max(first_key[t], static_cast<int32_t>(t - docs_.window + 1));
    if (docs_.uses_eod() && x[t] == eod) start = t + 1;
  }
}

std::string TokenWindows::summary() const {
  return std::to_string(train_size_) + " train / " + std::to_string(eval_size_) + " eval windows of " +
         std::to_string(context_) + "+1 tokens (" + train_->format() + ")" +
         (!train_windows_.empty() ? "; windows end at end-of-document token " + std::to_string(docs_.eod) +
                                        " (padded, no loss on padding)"
                                  : "") +
         (docs_.mask_loss ? "; no loss after end-of-document token " + std::to_string(docs_.eod) : "") +
         (docs_.reset_attention ? "; attention within documents (ended by token " + std::to_string(docs_.eod) + ")"
                                : "") +
         (docs_.reset_positions ? "; positions restart after token " + std::to_string(docs_.eod) : "") +
         (docs_.window > 0 ? "; attention over the last " + std::to_string(docs_.window) + " tokens (sliding window)"
                           : "");
}

// ---- CausalLM ----------------------------------------------------------------------------------------

namespace {
std::vector<std::string> with(std::vector<std::string> v, const std::string& s) {
  v.push_back(s);
  return v;
}
}  // namespace

CausalLM::CausalLM(const std::string& family, const std::vector<std::string>& args, const dscpp_host_info& host,
                   std::vector<std::string> flags)
    : family_(family),
      args_(
          family, args,
          with(with(with(with(with(with(with(std::move(flags), "--init_partial"), "--eod_mask_loss"), "--doc_windows"),
                              "--reset_attention_mask"),
                         "--reset_position_ids"),
                    "--packing"),
               "--truncation")),
      compute_(host.compute_dtype) {
  this->host = host;
  config_ = model_source(family_, args_, *this);
}

std::unique_ptr<HfConfig> model_source(const std::string& family, Args& args, layers::Model& m) {
  const std::string dir = args.text("--from_hf"), file = args.text("--config");
  if (dir.empty() == file.empty())
    fail(DSCPP_E_INVALID_ARGUMENT, family + ": give the model as --from_hf DIR (config and weights) or --config "
                                            "config.json (shape only, initial weights from the init rule)");
  auto config = std::make_unique<HfConfig>(dir.empty() ? file : dir + "/config.json");
  if (!dir.empty()) m.init_from = dir;
  m.init_partial = args.has("--init_partial");
  if (m.init_partial && dir.empty()) fail(DSCPP_E_INVALID_ARGUMENT, family + ": --init_partial goes with --from_hf");
  m.export_config = config->text();
  lora_source(family, args, *config, m);
  return config;
}

layers::Env CausalLM::env(int64_t max_positions, int64_t window) {
  context_ = args_.integer("--context", std::min<int64_t>(max_positions, 1024), 1);
  docs_.reset_attention = args_.has("--reset_attention_mask");
  docs_.reset_positions = args_.has("--reset_position_ids");
  docs_.window = window > 0 && window < context_ ? window : 0;
  packing_ = args_.has("--packing");
  layers::Env e{layers::dtype_bytes(compute_), context_, docs_.packed() || packing_};
  e.lora = lora.get();
  return e;
}

void CausalLM::data_from(int64_t vocab) {
  if (context_ == 0) fail(DSCPP_E_INTERNAL, family_ + ": data before the context is known");
  lora_finish(family_, *this, "CAUSAL_LM");
  if (args_.has("--sft_data") || args_.has("--sft_eval")) return sft_data_from(vocab);
  if (packing_ || args_.has("--truncation"))
    fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": --packing and --truncation shape fine-tuning examples (--sft_data)");
  const std::string train = args_.text("--data");
  if (train.empty() && args_.has("--eval_data"))
    fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": --eval_data goes with --data FILE (the training tokens)");
  const auto bytes = static_cast<int>(args_.integer("--token_bytes", 2, 1));
  if (bytes != 1 && bytes != 2 && bytes != 4) fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": --token_bytes is 1, 2 or 4");
  docs_.mask_loss = args_.has("--eod_mask_loss");
  docs_.windows = args_.has("--doc_windows");
  const char* const flags = "--eod_mask_loss, --doc_windows, --reset_attention_mask or --reset_position_ids";
  if (args_.has("--eos_id") && !docs_.uses_eod())
    fail(DSCPP_E_INVALID_ARGUMENT,
         family_ + ": --eos_id names the end-of-document token of " + flags + "; give one of them");
  if (docs_.uses_eod()) {
    docs_.eod = args_.integer("--eos_id", -1, 0);
    if (docs_.eod < 0 && config_->has("eos_token_id") && config_->json()["eos_token_id"].is_number_integer())
      docs_.eod = config_->integer("eos_token_id");
    if (docs_.eod < 0 || docs_.eod >= vocab)
      fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": " + flags + " need the end-of-document token: --eos_id N, or an " +
                                         "integer eos_token_id below the vocabulary (" + std::to_string(vocab) +
                                         ") in " + config_->path());
  }
  // Without --data the model still describes itself, generates and evaluates nothing: the
  // runtime refuses to train a model with no training samples.
  if (!train.empty())
    data_ = std::make_unique<TokenWindows>(family_, train, args_.text("--eval_data"), bytes, vocab, context_, docs_);
  args_.finish();
  describe_data(data_ ? data_->train_size() : 0, data_ ? data_->eval_size() : 0, data_ ? data_->summary() : "");
}

// --sft_data / --sft_eval: supervised fine-tuning examples (sft_data.h) instead of token windows.
void CausalLM::sft_data_from(int64_t vocab) {
  const std::string train = args_.text("--sft_data"), eval = args_.text("--sft_eval");
  if (train.empty())
    fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": --sft_eval goes with --sft_data FILE (the training examples)");
  for (const char* other :
       {"--data", "--eval_data", "--eod_mask_loss", "--doc_windows", "--reset_attention_mask", "--reset_position_ids"})
    if (args_.has(other))
      fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": " + other +
                                         " is for token files; --sft_data takes examples (with "
                                         "--packing to put several in a sample)");
  SftOptions o;
  o.vocab_size = vocab;
  o.eos = static_cast<int32_t>(args_.integer("--eos_id", -1, 0));
  if (o.eos < 0 && config_->has("eos_token_id") && config_->json()["eos_token_id"].is_number_integer())
    o.eos = static_cast<int32_t>(config_->integer("eos_token_id"));
  o.threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));  // tokenizing text lines
  std::string tok_dir = args_.text("--tokenizer");
  if (tok_dir.empty() && !init_from.empty() && std::filesystem::exists(init_from + "/tokenizer.json"))
    tok_dir = init_from;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  if (!tok_dir.empty()) {
    try {
      tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::load(tok_dir));
    } catch (const std::exception& e) {
      fail(DSCPP_E_IO, family_ + ": " + e.what());
    }
  }
  auto examples = read_sft(train, o, tokenizer.get());
  auto eval_examples = eval.empty() ? std::vector<SftExample>{} : read_sft(eval, o, tokenizer.get());
  sft_ = std::make_unique<SftSamples>(family_, std::move(examples), std::move(eval_examples), context_, packing_,
                                      args_.has("--truncation"), std::max<int32_t>(o.eos, 0));
  args_.finish();
  describe_data(sft_->train_size(), sft_->eval_size(), sft_->summary());
}

void CausalLM::describe_data(int64_t train_size, int64_t eval_size, const std::string& summary) {
  data = dscpp_data_desc{};
  data.train_size = train_size;
  data.eval_size = eval_size;
  data.input_dtype = DSCPP_I32;
  data.input_numel = docs_.packed() || packing_ ? 3 * context_ : context_;  // layers::Env::sample_ints()
  data.target_dtype = DSCPP_I32;
  data.target_numel = context_;
  data.tokens_per_sample = context_;
  if (host.rank == 0 && !summary.empty()) log(family_ + ": " + summary);
}

void CausalLM::load_sample(int32_t split, int64_t index, void* input, int32_t* target) const {
  if (sft_) return sft_->load(split, index, input, target);
  data_->load(split, index, input, target);
}

}  // namespace dscpp::models
