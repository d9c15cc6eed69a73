#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dscpp::tok {

namespace fs = std::filesystem;

void refuse(const Where& w, std::string_view what) { fail("{}: {}: {}", w.file, w.path, what); }

std::string string_at(const nlohmann::json& j, const Where& w, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    refuse(w / key,
           "expected a string" + std::string(j.is_object() && j.contains(key) ? ", found " + j[key].dump() : ""));
  return j[key].get<std::string>();
}

bool bool_at(const nlohmann::json& j, const char* key, bool fallback) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail("{}: cannot read it", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON (byte {}): {}", p.string(), e.byte, e.what());
  }
}

// The ids a TemplateProcessing / Bert / Roberta post-processor puts before and after a single
// sequence; refuses what it cannot express that way.
void post_processor_ids(const nlohmann::json& j, const Where& w, std::vector<int32_t>& prefix,
                        std::vector<int32_t>& suffix) {
  if (j.is_null()) return;
  const std::string type = string_at(j, w, "type");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const auto& list = j.at("processors");
    for (size_t i = 0; i < list.size(); ++i) post_processor_ids(list[i], (w / "processors")[i], prefix, suffix);
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    prefix.push_back(j.at("cls")[1].get<int32_t>());
    suffix.push_back(j.at("sep")[1].get<int32_t>());
    return;
  }
  if (type != "TemplateProcessing") refuse(w / "type", "unknown post-processor \"" + type + "\"");
  const auto& single = j.at("single");
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const auto& piece = single[i];
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string("A")) != "A")
        refuse((w / "single")[i], "a single-sequence template may only name sequence A");
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string name = piece["SpecialToken"].at("id").get<std::string>();
      const auto& tokens = j.at("special_tokens");
      if (!tokens.contains(name)) refuse((w / "special_tokens"), "no entry for \"" + name + "\"");
      for (const auto& id : tokens[name].at("ids")) (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
    } else {
      refuse((w / "single")[i], "expected Sequence or SpecialToken");
    }
  }
}

bool is_word_char(char32_t c) { return c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : c > 0x7F); }

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t n = 0;
  return next_code_point(s, i, &n);
}

}  // namespace

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  fs::path file = path;
  if (fs::is_directory(file)) file /= "tokenizer.json";
  if (!fs::exists(file)) {
    const fs::path dir = fs::is_directory(path) ? fs::path(path) : file.parent_path();
    const bool spm = fs::exists(dir / "tokenizer.model") || fs::exists(dir / "spiece.model");
    fail("{}: no tokenizer.json{}", path,
         spm ? " (the directory has only a SentencePiece model; save the fast tokenizer with transformers' "
               "save_pretrained to write tokenizer.json)"
             : "");
  }
  Tokenizer t;
  t.file_ = file.string();
  const nlohmann::json j = read_json(file);
  const Where root{t.file_};
  if (!j.is_object() || !j.contains("model")) refuse(root, "expected a tokenizer object with a \"model\"");
  if (j.contains("truncation") && !j["truncation"].is_null())
    refuse(root / "truncation", "truncation is set in the file; dscpp encodes whole texts (remove it)");
  t.normalizer_ = make_normalizer(j.value("normalizer", nlohmann::json()), root / "normalizer");
  t.pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()), root / "pre_tokenizer");
  t.model_ = make_model(j["model"], root / "model");
  t.decoder_ = make_decoder(j.value("decoder", nlohmann::json()), root / "decoder");
  post_processor_ids(j.value("post_processor", nlohmann::json()), root / "post_processor", t.prefix_, t.suffix_);
  if (j.contains("added_tokens")) {
    const auto& list = j["added_tokens"];
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& a = list[i];
      AddedToken tok;
      tok.id = a.at("id").get<int32_t>();
      tok.content = string_at(a, (root / "added_tokens")[i], "content");
      tok.single_word = bool_at(a, "single_word", false);
      tok.lstrip = bool_at(a, "lstrip", false);
      tok.rstrip = bool_at(a, "rstrip", false);
      tok.normalized = bool_at(a, "normalized", true);
      tok.special = bool_at(a, "special", false);
      if (tok.content.empty()) refuse((root / "added_tokens")[i], "an added token with empty content");
      t.added_.push_back(std::move(tok));
    }
    std::stable_sort(t.added_.begin(), t.added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config)) {
    const nlohmann::json c = read_json(config);
    t.clean_up_spaces_ = bool_at(c, "clean_up_tokenization_spaces", true);
    if (c.is_object() && c.contains("truncation_side")) {
      const std::string side = string_at(c, Where{config.string()}, "truncation_side");
      if (side != "left" && side != "right")
        refuse(Where{config.string()} / "truncation_side", "expected \"left\" or \"right\", found \"" + side + "\"");
      t.truncate_left_ = side == "left";
    }
  }
  return t;
}

void Tokenizer::split_added(std::string_view text, bool normalized,
                            std::vector<std::pair<std::string, int32_t>>& out) const {
  // Leftmost-longest over the tokens of this kind; then single_word, lstrip and rstrip as
  // AddedVocabulary::find_matches applies them.
  size_t start_offset = 0, search = 0;
  while (search < text.size()) {
    const AddedToken* hit = nullptr;
    size_t at = std::string_view::npos;
    for (const AddedToken& a : added_) {
      if (a.normalized != normalized) continue;
      const size_t p = text.find(a.content, search);
      if (p < at) at = p, hit = &a;  // longest first: the first found at a position is the longest
    }
    if (!hit) break;
    size_t start = at, stop = at + hit->content.size();
    search = stop;
    if (hit->single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      size_t n = 0;
      const bool stop_space = stop == text.size() || !is_word_char(next_code_point(text, stop, &n));
      if (!start_space || !stop_space) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t k = s - 1;
        while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t n = 0;
        if (!is_whitespace(next_code_point(text, k, &n))) break;
        s = k;
      }
      start = std::max(s, start_offset);
    }
    if (hit->rstrip) {
      size_t n = 0;
      while (stop < text.size() && is_whitespace(next_code_point(text, stop, &n))) stop += n;
    }
    if (start_offset < start) out.emplace_back(std::string(text.substr(start_offset, start - start_offset)), -1);
    out.emplace_back(std::string(), hit->id);
    start_offset = stop;
  }
  if (start_offset < text.size() || text.empty())
    out.emplace_back(std::string(text.substr(start_offset)), -1);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!valid_utf8(text)) {
    size_t i = 0, n = 0;
    while (i < text.size() && (next_code_point(text, i, &n) != 0xFFFD || text.substr(i, 3) == "\xEF\xBF\xBD")) i += n;
    fail("the text is not valid UTF-8 (byte {}); tokenizers take Unicode text", i);
  }
  std::vector<int32_t> ids = add_special_tokens ? prefix_ : std::vector<int32_t>{};
  // Pieces of text (id -1) and added tokens; a text piece at index 0 begins the text.
  std::vector<std::pair<std::string, int32_t>> raw, pieces;
  split_added(text, false, raw);
  bool first_at_start = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    auto& [piece, id] = raw[i];
    if (id >= 0) {
      pieces.emplace_back(std::string(), id);
      continue;
    }
    const size_t before = pieces.size();
    split_added(normalizer_ ? normalizer_->normalize(piece) : piece, true, pieces);
    if (i == 0 && pieces.size() > before && pieces[before].second < 0) first_at_start = true;
  }
  std::vector<std::string> words;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& [piece, id] = pieces[i];
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    words.clear();
    if (pre_tokenizer_) pre_tokenizer_->split(piece, i == 0 && first_at_start, words);
    else if (!piece.empty()) words.push_back(piece);
    for (const std::string& w : words) model_->tokenize(w, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    const auto added = std::find_if(added_.begin(), added_.end(), [id](const AddedToken& a) { return a.id == id; });
    if (added != added_.end()) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* t = model_->token(id)) {
      tokens.push_back(*t);
    }
  }
  std::string text;
  if (decoder_) {
    decoder_->decode(tokens);
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  if (!clean_up_spaces_) return text;
  static const std::pair<std::string_view, std::string_view> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : rules) {  // str.replace, one rule after another, as transformers applies them
    std::string out;
    size_t at = 0;
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, at)) {
      out.append(text, at, p - at);
      out += to;
      at = p + from.size();
    }
    text = out.append(text, at);
  }
  return text;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  const auto it = model_->vocab().find(std::string(token));
  return it == model_->vocab().end() ? -1 : it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  for (const AddedToken& a : added_)
    if (a.id == id) return a.content;
  const std::string* t = model_->token(id);
  return t ? *t : std::string();
}

size_t Tokenizer::vocab_size() const {
  size_t extra = 0;
  for (const AddedToken& a : added_) extra += model_->token(a.id) ? 0 : 1;
  return model_->vocab().size() + extra;
}

}  // namespace dscpp::tok
