// The stages of a Hugging Face tokenizer (tokenizer.json), as the `tokenizers` library runs
// them: added tokens are split out of the raw text, each remaining piece is normalized,
// pre-tokenized into words, and the model turns each word into ids; the post-processor adds
// special tokens. Decoding runs the decoders over the tokens' strings.
//
// Each stage reads its own JSON object; a component this library cannot run exactly is
// refused naming the file and the JSON path (`Where`), never approximated.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dscpp::tok {

// Where in which file a JSON value was read: "tokenizer.json: $.pre_tokenizer.pretokenizers[1]".
struct Where {
  std::string file;
  std::string path = "$";
  Where operator/(std::string_view key) const { return {file, path + "." + std::string(key)}; }
  Where operator[](size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
};
[[noreturn]] void refuse(const Where& w, std::string_view what);
// The string member `key` of `j`, or refuses naming it.
std::string string_at(const nlohmann::json& j, const Where& w, const char* key);
bool bool_at(const nlohmann::json& j, const char* key, bool fallback);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};
// null JSON: none (nullptr).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const Where& w);
std::unique_ptr<Normalizer> make_precompiled(const nlohmann::json& j, const Where& w);  // precompiled.cpp

// A pre-tokenizer refines a list of words: each word in, its parts out (in order).
// `at_start`: the word begins the encoded text (Metaspace's prepend_scheme "first" asks).
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void split(std::string_view word, bool at_start, std::vector<std::string>& out) const = 0;
  void split(std::string_view word, std::vector<std::string>& out) const { split(word, false, out); }
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const Where& w);

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& ids) const = 0;
  virtual const std::unordered_map<std::string, int32_t>& vocab() const = 0;
  virtual const std::string* token(int32_t id) const = 0;  // null: not in the model's vocabulary
};
std::unique_ptr<Model> make_model(const nlohmann::json& j, const Where& w);
std::unique_ptr<Model> make_unigram(const nlohmann::json& j, const Where& w);    // unigram.cpp
std::unique_ptr<Model> make_wordpiece(const nlohmann::json& j, const Where& w);  // wordpiece.cpp

// Decoders work on the list of token strings, as `tokenizers`' decode_chain does; the text is
// their concatenation at the end.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const Where& w);

}  // namespace dscpp::tok
