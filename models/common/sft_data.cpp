#include "models/common/sft_data.h"

#include "dscpp/layers.h"
#include "models/common/json_lines.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

namespace dscpp::models {

using layers::fail;
using nlohmann::json;

namespace {

SftExample pre_tokenized(const json& line, const SftOptions& opt) {
  if (!line.contains("labels"))
    throw BadLine{"no \"labels\" beside \"input_ids\" (the line's keys: " + keys_of(line) +
                  "); -100 marks the tokens without loss"};
  SftExample ex{token_ids(line, "input_ids", opt.vocab_size), token_ids(line, "labels", opt.vocab_size)};
  if (ex.labels.size() != ex.ids.size())
    throw BadLine{"labels has " + std::to_string(ex.labels.size()) + " entries and input_ids " +
                  std::to_string(ex.ids.size()) + ": they must be as long (labels[i] is the token predicted at i)"};
  return ex;
}

SftExample from_text(const json& line, const SftOptions& opt, const tok::Tokenizer* t) {
  for (const char* key : {"prompt", "completion"}) {
    if (!line.contains(key)) throw BadLine{std::string("no \"") + key + "\" (the line's keys: " + keys_of(line) + ")"};
    if (!line[key].is_string()) throw BadLine{std::string(key) + " is " + a_type(line[key]) + ", expected a string"};
  }
  if (t == nullptr)
    throw BadLine{
        "a prompt/completion example needs the model's tokenizer (tokenizer.json in --from_hf's directory, "
        "or --tokenizer DIR); tokenized lines hold \"input_ids\" and \"labels\""};
  if (opt.eos < 0)
    throw BadLine{"a completion ends with the end-of-sequence token, and the model has none: give --eos_id N"};
  SftExample ex;
  try {
    ex.ids = t->encode(line["prompt"].get<std::string>(), true);
    ex.labels.assign(ex.ids.size(), -100);
    std::vector<int32_t> answer = t->encode(line["completion"].get<std::string>(), false);
    answer.push_back(opt.eos);
    ex.ids.insert(ex.ids.end(), answer.begin(), answer.end());
    ex.labels.insert(ex.labels.end(), answer.begin(), answer.end());
  } catch (const std::exception& e) {
    throw BadLine{std::string("cannot tokenize it: ") + e.what()};
  }
  for (size_t i = 0; i < ex.ids.size(); ++i) check_token_id(ex.ids[i], "token " + std::to_string(i), opt.vocab_size);
  return ex;
}

}  // namespace

std::vector<SftExample> read_sft(const std::string& path, const SftOptions& opt, const tok::Tokenizer* tokenizer) {
  auto examples = map_json_lines<SftExample>(path, opt.threads, [&](const json& line) -> std::optional<SftExample> {
    if (line.contains("messages"))
      throw BadLine{
          "a \"messages\" (chat) example: its chat_template is a Jinja program this reader does not "
          "run; apply the template and give {\"prompt\", \"completion\"}, or token ids with labels"};
    SftExample ex = line.contains("input_ids") ? pre_tokenized(line, opt) : from_text(line, opt, tokenizer);
    if (ex.ids.size() < 2) throw BadLine{"one token: nothing to predict"};
    if (std::all_of(ex.labels.begin() + 1, ex.labels.end(), [](int32_t l) { return l == -100; }))
      throw BadLine{"no token after the first carries a label: the example has no loss"};
    return ex;
  });
  return examples;
}

SftSamples::SftSamples(const std::string& family, std::vector<SftExample> train, std::vector<SftExample> eval,
                       int64_t context, bool packing, bool truncate, int32_t pad)
    : family_(family),
      train_examples_(std::move(train)),
      eval_examples_(std::move(eval)),
      context_(context),
      packing_(packing),
      pad_(pad) {
  if (eval_examples_.empty()) {  // the last tenth of the examples, as the token windows split
    const size_t keep = train_examples_.size() - train_examples_.size() / 10;
    eval_examples_.assign(std::make_move_iterator(train_examples_.begin() + static_cast<ptrdiff_t>(keep)),
                          std::make_move_iterator(train_examples_.end()));
    train_examples_.resize(keep);
  }
  for (auto* examples : {&train_examples_, &eval_examples_})
    for (size_t i = 0; i < examples->size(); ++i) {
      SftExample& ex = (*examples)[i];
      if (static_cast<int64_t>(ex.ids.size()) > context_ + 1) {
        if (!truncate)
          fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": " + (examples == &train_examples_ ? "training" : "evaluation") +
                                             " example " + std::to_string(i) + " has " + std::to_string(ex.ids.size()) +
                                             " tokens, more than context+1 = " + std::to_string(context_ + 1) +
                                             " (--truncation cuts such examples)");
        ex.ids.resize(static_cast<size_t>(context_ + 1));
        ex.labels.resize(ex.ids.size());
        ++truncated_;
      }
      loss_tokens_ += std::count_if(ex.labels.begin() + 1, ex.labels.end(), [](int32_t l) { return l != -100; });
    }
  train_ = windows(train_examples_);
  eval_ = windows(eval_examples_);
  if (train_.empty()) fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": no training examples");
}

// One example a sample, or with packing consecutive examples while they fit in context+1 tokens.
std::vector<SftSamples::Window> SftSamples::windows(const std::vector<SftExample>& examples) const {
  std::vector<Window> out;
  for (size_t i = 0; i < examples.size();) {
    Window w{i, i + 1};
    size_t tokens = examples[i].ids.size();
    while (packing_ && w.end < examples.size() && tokens + examples[w.end].ids.size() <= size_t(context_ + 1))
      tokens += examples[w.end++].ids.size();
    out.push_back(w);
    i = w.end;
  }
  return out;
}

void SftSamples::load(int32_t split, int64_t index, void* input, int32_t* target) const {
  const std::vector<Window>& ws = split == 0 ? train_ : eval_;
  if ((split != 0 && split != 1) || index < 0 || index >= int64_t(ws.size()))
    fail(DSCPP_E_INVALID_ARGUMENT, family_ + ": sample " + std::to_string(index) + " of split " +
                                       std::to_string(split) + " (" + std::to_string(ws.size()) + " samples)");
  const std::vector<SftExample>& examples = split == 0 ? train_examples_ : eval_examples_;
  auto* x = static_cast<int32_t*>(input);
  int32_t* position = x + context_;
  int32_t* first_key = x + 2 * context_;
  std::fill(x, x + context_, pad_);
  std::fill(target, target + context_, -1);
  int64_t t = 0;
  for (size_t e = ws[size_t(index)].first; e < ws[size_t(index)].end; ++e) {
    const SftExample& ex = examples[e];
    const int64_t start = t;
    for (size_t i = 0; i < ex.ids.size() && t < context_; ++i, ++t) {
      x[t] = ex.ids[i];
      // The next token of the same example, where it carries a label; the last one predicts nothing.
      target[t] = i + 1 < ex.ids.size() && ex.labels[i + 1] != -100 ? ex.labels[i + 1] : -1;
      if (packing_) {
        position[t] = static_cast<int32_t>(t - start);
        first_key[t] = static_cast<int32_t>(start);
      }
    }
  }
  if (!packing_) return;
  for (; t < context_; ++t) {  // padding: after every real token, attending to itself alone
    position[t] = 0;
    first_key[t] = static_cast<int32_t>(t);
  }
}

std::string SftSamples::summary() const {
  return std::to_string(train_examples_.size()) + " train / " + std::to_string(eval_examples_.size()) +
         " eval fine-tuning examples in " + std::to_string(train_.size()) + " / " + std::to_string(eval_.size()) +
         (packing_ ? " packed" : "") + " samples of " + std::to_string(context_) + " tokens; " +
         std::to_string(loss_tokens_) + " tokens carry loss" +
         (truncated_ ? "; " + std::to_string(truncated_) + " examples cut to context+1 tokens" : "");
}

}  // namespace dscpp::models
