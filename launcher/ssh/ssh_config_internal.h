// What ssh_config.cpp (the parser) and ssh_target.cpp (one host's resolution) share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher::ssh_config_internal {

enum class Use { kIgnored, kHonoured, kRefused };

struct Keyword {
  const char* name;
  Use use = Use::kIgnored;
  const char* fine = nullptr;  // kRefused: lowercase values that change nothing ("no"); null: none
  const char* why = nullptr;   // kRefused: what dscpp does instead
};

// Every keyword OpenSSH knows, with what dscpp does with it.
const std::vector<Keyword>& keywords();
// The keyword, case-insensitively; nullptr when OpenSSH does not know it either.
const Keyword* find_keyword(std::string_view name);

int parse_port(std::string_view s);        // 1..65535, else 0
double parse_seconds(std::string_view s);  // OpenSSH time format ("90", "1m30s"), else -1

// "~" and "~/x" are `home`, "~user/x" that user's home; `where` prefixes the error.
std::string expand_tilde(const std::string& value, const std::string& home, const std::string& where);

}  // namespace dscpp::launcher::ssh_config_internal
