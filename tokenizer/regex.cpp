#include "tokenizer/regex.h"

#include "core/error.h"

#include <pcre2.h>

namespace dscpp::tok {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("{}: regular expression {:?} does not compile at offset {}: {}", where, pattern, offset,
         reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // without JIT (unsupported CPU) it still runs
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  // The text is valid UTF-8 (checked once at the tokenizer's entry), so PCRE2 need not check it again.
  while (at <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("regular expression match failed (PCRE2 error {})", rc);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      at = e;
    } else {  // an empty match: step over one whole character
      at = b + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::string escape_regex(std::string_view literal) {
  std::string out = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.substr(i, 2) == "\\E") {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += literal[i];
    }
  }
  return out + "\\E";
}

std::unique_ptr<Regex> pattern_regex(const nlohmann::json& pattern, const std::string& where) {
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
    return std::make_unique<Regex>(pattern["Regex"].get<std::string>(), where);
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
    return std::make_unique<Regex>(escape_regex(pattern["String"].get<std::string>()), where);
  fail("{}: expected {{\"Regex\": ...}} or {{\"String\": ...}}, found {}", where, pattern.dump());
}

std::string replace_all(const Regex& re, std::string_view text, std::string_view content) {
  std::string out;
  size_t at = 0;
  for (auto [b, e] : re.find_all(text)) {
    out.append(text.substr(at, b - at));
    out.append(content);
    at = e;
  }
  return out.append(text.substr(at));
}

}  // namespace dscpp::tok
