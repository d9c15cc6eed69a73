// What every shipped causal language model family shares: its plugin arguments, the Hugging
// Face config.json it is built from, and token-file data cut into windows.
//
// Arguments (after `--` on the dscpp command line):
//   --from_hf DIR       a Hugging Face model directory: config.json and model.safetensors (or a
//                       sharded model.safetensors.index.json); the run starts from its weights
//   --config FILE       a config.json only: the model's shape, weights from the family's init rule
//   --init_partial      with --from_hf: parameters the files lack keep their init, unused tensors
//                       are listed instead of refused
//   --data FILE         training tokens (examples/common/token_file.h: llm.c's or Megatron's
//                       format, or headerless uint16/uint32/bytes with --token_bytes 2|4|1; 1
//                       reads any file, e.g. a text, as byte tokens for a vocabulary ≥ 256)
//   --eval_data FILE    evaluation tokens; without it the last tenth of --data's windows
//   --context N         tokens per sample (default: the config's maximum positions, at most 1024)
//   --eod_mask_loss     documents packed end to end: no loss where the input token is the end of
//                       a document (Megatron's eod_mask_loss), so no document is predicted from
//                       the one before; the token is --eos_id N, else the config's eos_token_id
//   --doc_windows       no window crosses a document boundary (the end-of-document token as
//                       above ends each document): a document is cut into windows of context+1
//                       tokens from its start, the last one padded; padding comes after every real
//                       token (so causal attention never lets one see it) and has no loss
//   --reset_attention_mask  documents packed end to end (the token as above ends each): a token
//                       attends only to tokens of its own document (Megatron's flag of this name)
//   --reset_position_ids    positions restart at 0 after each end-of-document token (Megatron's);
//                       with both flags a window computes what its documents would one by one
//   --sft_data FILE     supervised fine-tuning examples instead of tokens (sft_data.h: prompt and
//                       completion, or input_ids and labels), the loss on the completion only
//   --sft_eval FILE     evaluation examples; without it the last tenth of --sft_data's
//   --packing           several whole examples in a sample, each attending to itself alone
//   --truncation        an example longer than context+1 tokens is cut (else an error)
//   --tokenizer DIR     for prompt/completion lines (default: --from_hf's directory);
//                       --eos_id N ends each completion (default: the config's eos_token_id)
//   --lora SPEC         train a LoRA adapter (PEFT's) instead of the model, e.g.
//                       r=16,alpha=32,target=q_proj,v_proj (lora_config.h has every key)
//   --lora_from DIR     the same from PEFT's adapter directory (adapter_config.json and
//                       adapter_model.safetensors), to go on training it
// Samples are non-overlapping windows of context+1 tokens: window w = tokens[w·(T+1), (w+1)·(T+1)),
// input its first T tokens, target its last T; every token is checked against the vocabulary.
#pragma once

#include "dscpp/layers.h"
#include "sft_data.h"
#include "token_file.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dscpp::models {

// "--key value" and "--key=value" pairs; flags listed in `flags` take no value.
class Args {
 public:
  Args(const std::string& family, const std::vector<std::string>& args, const std::vector<std::string>& flags);
  bool has(const std::string& key);
  std::string text(const std::string& key, const std::string& fallback = "");
  int64_t integer(const std::string& key, int64_t fallback, int64_t lo);
  // Fails naming the first argument no one asked for.
  void finish() const;

 private:
  std::string family_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> used_;
};

// A config.json with typed, located reads: every failure names the file and the key.
class HfConfig {
 public:
  explicit HfConfig(const std::string& path);
  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }
  bool has(const std::string& key) const;  // present and not null
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  const nlohmann::json& json() const { return json_; }
  [[noreturn]] void bad(const std::string& key, const std::string& what) const;

 private:
  std::string path_, text_;
  nlohmann::json json_;
};

// --from_hf DIR / --config FILE / --init_partial (the flag must be among the Args' flags): the
// model's config.json, and the weights and export config `m` declares; and --lora / --lora_from
// (lora_config.h: m.lora, whose layers' Env must point at it, and lora_finish once they are made).
std::unique_ptr<HfConfig> model_source(const std::string& family, Args& args, layers::Model& m);

// How document boundaries (an end-of-document token, which belongs to the document it ends) shape
// the windows.
struct Documents {
  int64_t eod = -1;
  bool mask_loss = false;        // --eod_mask_loss: targets where the input is eod are ignored (−1)
  bool windows = false;          // --doc_windows: windows stop at documents' ends
  bool reset_attention = false;  // --reset_attention_mask: samples carry each token's first key
  bool reset_positions = false;  // --reset_position_ids: samples carry positions within documents
  int64_t window = 0;            // a sliding window shorter than the context: first keys ≥ t − window + 1
  bool uses_eod() const { return mask_loss || windows || reset_attention || reset_positions; }
  // Samples are [ids | positions | first keys] (layers::Env::documents).
  bool packed() const { return reset_attention || reset_positions || window > 0; }
};

// Token windows of context+1 from the data files, split into train and eval.
class TokenWindows {
 public:
  TokenWindows(const std::string& family, const std::string& train, const std::string& eval, int token_bytes,
               int64_t vocab, int64_t context, const Documents& docs = {});
  int64_t train_size() const { return train_size_; }
  int64_t eval_size() const { return eval_size_; }
  void load(int32_t split, int64_t index, void* input, int32_t* target) const;
  std::string summary() const;

 private:
  std::string family_;
  int64_t context_;
  std::unique_ptr<examples::TokenFile> train_, eval_;
  // A window: its first token in the file and its length (≤ context+1).
  struct Window {
    int64_t start;
    int64_t length;
  };
  std::vector<Window> document_windows(const examples::TokenFile& f) const;

  int64_t train_size_ = 0, eval_size_ = 0, eval_first_ = 0;  // eval windows start at eval_first_ of their file
  Documents docs_;
  std::vector<Window> train_windows_, eval_windows_;  // with --doc_windows; else windows are w·(context+1)
};

// The parts of a model every family fills the same way: the data description, weights to start
// from (--from_hf), the config to export, and the data itself.
class CausalLM : public layers::Model {
 public:
  // Reads --from_hf/--config, --data/--eval_data, --context; `context_cap`: the config's maximum
  // positions. Call data_from() once the vocabulary is known.
  // `flags`: the family's own arguments that take no value.
  CausalLM(const std::string& family, const std::vector<std::string>& args, const dscpp_host_info& host,
           std::vector<std::string> flags = {});
  const HfConfig& config() const { return *config_; }
  Args& args() { return args_; }
  // The layers' environment for a context of at most max_positions (default 1024) and the
  // attention's sliding window (0: none), with the model's LoRA.
  layers::Env env(int64_t max_positions, int64_t window = 0);
  // The data, once the layers are made (it also finishes their LoRA: lora_config.h's lora_finish).
  void data_from(int64_t vocab);
  void load_sample(int32_t split, int64_t index, void* input, int32_t* target) const override;

 private:
  std::string family_;
  Args args_;
  std::unique_ptr<HfConfig> config_;
  std::unique_ptr<TokenWindows> data_;
  std::unique_ptr<SftSamples> sft_;
  dscpp_dtype compute_;
  int64_t context_ = 0;
  Documents docs_;
  bool packing_ = false;
  void sft_data_from(int64_t vocab);
  void describe_data(int64_t train_size, int64_t eval_size, const std::string& summary);
};

}  // namespace dscpp::models
