// Which environment variables reach ranks on other hosts, and how they are written into the
// remote command.
//
// Local ranks inherit the launcher's whole environment. Remote ranks get only what is listed
// here, in increasing precedence:
//   1. launcher variables whose names match the allowlist (export_rules(): DeepSpeed's
//      prefixes plus dscpp's documented additions), sorted by name;
//   2. `~/.deepspeed_env`, then `./.deepspeed_env` (file name from $DS_ENV_FILE if set);
//      unlike DeepSpeed these allow `# comments`, blank lines, `export K=V` and shell quoting
//      ('...' literal, "..." with \" \\ \$ \` escapes; no $expansion), and an error names
//      file:line. A quoted value loses its quotes (DeepSpeed kept them literally).
//   3. `--env K=V` (or `--env K`: forward the launcher's own K), in command-line order.
// Later sources override earlier ones; the result names each variable once.
#pragma once

#include "launcher/launch_plan.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher {

// One row of the forwarding allowlist. Like DeepSpeed, every row is matched as a name prefix
// (so "NCCL" also forwards "NCCLX_..."), including the Nebula/AzureML names.
struct ExportRule {
  std::string_view prefix;
  std::string_view origin;  // "deepspeed" or "dscpp"
  std::string_view why;
};
std::span<const ExportRule> export_rules();

// True when a launcher variable named `name` is forwarded under the allowlist (`environment`
// is consulted for DeepSpeed's AISC_JOB_NAME rule: then NCCL_IB_HCA and UCX_NET_DEVICES are not).
bool is_forwarded_name(std::string_view name, const Environment& environment);

// Source 1: the allowlisted part of `environment`, sorted by name. Rank variables, names that
// are not shell identifiers and secrets (DSCPP_JOB_SECRET, which dscpp hands over itself, and
// DSCPP_SSH_PASSPHRASE) are never forwarded; an env file or --env naming DSCPP_JOB_SECRET is an
// error.
EnvList forwarded_environment(const Environment& environment);

// An env file's assignments in file order. `file_name` is used in messages.
EnvList parse_env_file(std::string_view text, std::string_view file_name);
// Reads and parses `path`; unreadable is an error naming it.
EnvList load_env_file(const std::string& path);

// The env files to read, in order: $HOME/NAME then CWD/NAME, NAME = $DS_ENV_FILE or
// ".deepspeed_env". An absolute DS_ENV_FILE is one path (DeepSpeed read it twice). No HOME:
// only the CWD one.
std::vector<std::string> env_file_paths(const Environment& environment, const std::string& cwd);

struct ExportInputs {
  Environment environment{};           // the launcher's own
  std::string cwd = ".";               // where ./.deepspeed_env is looked for
  std::vector<std::string> cli_env{};  // --env values, in order: "K=V" or "K"
};

// Sources 1-3 merged. Reads the env files that exist (missing ones are skipped).
EnvList build_exported_env(const ExportInputs& inputs);

// [A-Za-z_][A-Za-z0-9_]*
bool is_env_name(std::string_view name);

// `value` as one word for a POSIX shell: unchanged when it has only [A-Za-z0-9_@%+=:,./-]
// (and is not empty), else in '...' with each ' written as '\'' (Python's shlex.quote).
std::string shell_quote(std::string_view value);
// "export K1=V1; export K2='a b'; " — the prefix the SSH runner puts before the command.
std::string shell_exports(const EnvList& env);

// A snapshot of `envp` (e.g. `environ`); the first of duplicate names wins, as with getenv.
Environment environment_from(char** envp);

}  // namespace dscpp::launcher
