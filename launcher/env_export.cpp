// The forwarding allowlist, env files with shell-like quoting, --env, and shell quoting.
#include "launcher/env_export.h"

#include "core/error.h"
#include "core/job_secret.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dscpp::launcher {
namespace {

// Written once: docs and `--dry-run` print this table. DeepSpeed's rows are runner.py's
// EXPORT_ENVS + the CUDA accelerator's prefix + NEBULA_EXPORT_ENVS (all matched as prefixes).
constexpr ExportRule kExportRules[] = {
    {"NCCL", "deepspeed", "NCCL settings (CUDA accelerator prefix)"},
    {"PYTHON", "deepspeed", "Python interpreter settings (PYTHONPATH, PYTHONUNBUFFERED, ...)"},
    {"MLFLOW", "deepspeed", "MLflow tracking"},
    {"MV2", "deepspeed", "MVAPICH2 settings"},
    {"UCX", "deepspeed", "UCX transport settings"},
    {"DLTS_JOB_ID", "deepspeed", "Nebula/DLTS job metadata"},
    {"DLTS_NUM_WORKER", "deepspeed", "Nebula/DLTS job metadata"},
    {"NEBULA_PERSISTENT_STORAGE_PATH", "deepspeed", "Nebula checkpointing"},
    {"NEBULA_PERSISTENT_TIME_INTERVAL", "deepspeed", "Nebula checkpointing"},
    {"NEBULA_MEMORY_BUFFER_SIZE", "deepspeed", "Nebula checkpointing"},
    {"AML_RUN_ID", "deepspeed", "AzureML run metadata"},
    {"AZUREML_RUN_TOKEN", "deepspeed", "AzureML run metadata"},
    {"AZUREML_WORKSPACE_SCOPE", "deepspeed", "AzureML run metadata"},
    {"AZUREML_EXPERIMENT_SCOPE", "deepspeed", "AzureML run metadata"},
    {"AZUREML_RUN_HISTORY_SERVICE_ENDPOINT", "deepspeed", "AzureML run metadata"},
    {"AZUREML_RUN_ID", "deepspeed", "AzureML run metadata"},
    {"AZUREML_PARAMETER_ITPJOB_NAME", "deepspeed", "AzureML run metadata"},
    {"AZUREML_BLOB_ACCOUNT_NAME", "deepspeed", "AzureML storage"},
    {"AZUREML_BLOB_ACCOUNT_KEY", "deepspeed", "AzureML storage"},
    {"FC_TASKROLE_NAME", "deepspeed", "DLTS task role"},
    {"FC_TASK_INDEX", "deepspeed", "DLTS task role"},
    {"MASTER_HOST", "deepspeed", "Nebula master host"},
    {"LOCAL_HOST", "deepspeed", "Nebula local host"},
    {"DSCPP_", "dscpp", "dscpp's own settings (timeouts, logging) must agree on every host"},
    {"OMP_", "dscpp", "OpenMP thread settings, which local ranks inherit anyway"},
    {"GLOO_", "dscpp", "gloo transport settings (GLOO_SOCKET_IFNAME)"},
};

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

// Parses the value of one env-file assignment starting at `line[pos]`, shell style.
std::string parse_value(std::string_view line, size_t pos, std::string_view where) {
  std::string value;
  bool skipped_blank = false;
  while (pos < line.size() && is_blank(line[pos])) ++pos, skipped_blank = true;  // DeepSpeed allowed "K = V"
  if (skipped_blank && pos < line.size() && line[pos] == '#') return value;
  while (pos < line.size() && !is_blank(line[pos])) {
    char c = line[pos++];
    if (c == '\'') {
      size_t close = line.find('\'', pos);
      if (close == std::string_view::npos) fail("{}: found an unterminated ' quote; expected a closing '", where);
      value.append(line.substr(pos, close - pos));
      pos = close + 1;
    } else if (c == '"') {
      while (pos < line.size() && line[pos] != '"') {
        if (line[pos] == '\\' && pos + 1 < line.size() && line[pos + 1] != '\0' && std::strchr("\"\\$`", line[pos + 1]))
          ++pos;
        value += line[pos++];
      }
      if (pos == line.size()) fail("{}: found an unterminated \" quote; expected a closing \"", where);
      ++pos;
    } else if (c == '\\') {
      if (pos == line.size())
        fail("{}: found '\\' at the end of the line; expected the value on one line (continuations are not supported)",
             where);
      value += line[pos++];
    } else {
      value += c;
    }
  }
  while (pos < line.size() && is_blank(line[pos])) ++pos;
  if (pos < line.size() && line[pos] != '#')
    fail("{}: found \"{}\" after the value; expected one value per line (quote values with spaces: K='a b')", where,
         line.substr(pos));
  return value;
}

// Secrets the launcher holds for itself or hands over on its own channel: forwarding would put
// them on the remote command line (/proc/PID/cmdline), where every user of a host can read them.
bool is_secret_name(std::string_view name) {
  return name == kJobSecretVar || name == "DSCPP_SSH_PASSPHRASE";
}

void check_not_rank_variable(std::string_view name, std::string_view where) {
  if (name == kJobSecretVar)
    fail(
        "{}: {} cannot be exported this way (it would travel on a command line); set it in dscpp's own "
        "environment or name a file with {}, and dscpp hands it to every rank itself",
        where, name, kJobSecretFileVar);
  if (!is_rank_variable(name)) return;
  fail("{}: {} is set by dscpp for every rank and cannot be exported; {}", where, name,
       name.starts_with("MASTER_") ? "use --master_addr/--master_port" : "remove it");
}

}  // namespace

std::span<const ExportRule> export_rules() {
  return kExportRules;
}

bool is_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  });
}

bool is_forwarded_name(std::string_view name, const Environment& environment) {
  if (environment.contains("AISC_JOB_NAME") && (name == "NCCL_IB_HCA" || name == "UCX_NET_DEVICES")) return false;
  return std::any_of(std::begin(kExportRules), std::end(kExportRules),
                     [&](const ExportRule& rule) { return name.starts_with(rule.prefix); });
}

EnvList forwarded_environment(const Environment& environment) {
  EnvList out;
  for (const auto& [name, value] : environment)
    if (is_env_name(name) && !is_rank_variable(name) && !is_secret_name(name) && is_forwarded_name(name, environment))
      out.emplace_back(name, value);
  return out;
}

EnvList parse_env_file(std::string_view text, std::string_view file_name) {
  EnvList out;
  int line_no = 1;
  for (size_t pos = 0; pos <= text.size(); ++line_no) {
    size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);
    std::string where = fmt::format("{}:{}", file_name, line_no);
    size_t i = 0;
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i == line.size() || line[i] == '#') continue;
    if (line.substr(i).starts_with("export") && i + 6 < line.size() && is_blank(line[i + 6])) {
      i += 6;
      while (i < line.size() && is_blank(line[i])) ++i;
    }
    size_t name_end = i;
    while (name_end < line.size() && line[name_end] != '=' && !is_blank(line[name_end])) ++name_end;
    std::string_view name = line.substr(i, name_end - i);
    size_t eq = name_end;
    while (eq < line.size() && is_blank(line[eq])) ++eq;
    if (eq == line.size() || line[eq] != '=')
      fail("{}: found \"{}\"; expected NAME=VALUE (optionally after \"export\"; # starts a comment)", where,
           line.substr(i));
    if (!is_env_name(name))
      fail("{}: found the name \"{}\"; expected letters, digits and '_', not starting with a digit", where, name);
    check_not_rank_variable(name, where);
    set_env(out, name, parse_value(line, eq + 1, where));
  }
  return out;
}

EnvList load_env_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec))
    fail("cannot read env file '{}': {}; expected a readable file of NAME=VALUE lines", path,
         in ? "it is a directory" : std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_env_file(text.str(), path);
}

std::vector<std::string> env_file_paths(const Environment& environment, const std::string& cwd) {
  auto it = environment.find("DS_ENV_FILE");
  std::filesystem::path name = it != environment.end() && !it->second.empty() ? it->second : ".deepspeed_env";
  std::vector<std::string> paths;
  if (name.is_absolute()) return {name.string()};
  if (auto home = environment.find("HOME"); home != environment.end() && !home->second.empty())
    paths.push_back((std::filesystem::path(home->second) / name).string());
  std::string local = (std::filesystem::path(cwd) / name).string();
  if (paths.empty() || paths.front() != local) paths.push_back(local);
  return paths;
}

EnvList build_exported_env(const ExportInputs& inputs) {
  EnvList out = forwarded_environment(inputs.environment);
  for (const std::string& path : env_file_paths(inputs.environment, inputs.cwd)) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    for (const auto& [name, value] : load_env_file(path)) set_env(out, name, value);
  }
  for (const std::string& item : inputs.cli_env) {
    size_t eq = item.find('=');
    std::string name = item.substr(0, eq);
    std::string where = fmt::format("--env {}", item);
    if (!is_env_name(name))
      fail("{}: found the name \"{}\"; expected NAME=VALUE with a name of letters, digits and '_'", where, name);
    check_not_rank_variable(name, where);
    if (eq != std::string::npos) {
      set_env(out, name, std::string_view(item).substr(eq + 1));
      continue;
    }
    auto it = inputs.environment.find(name);
    if (it == inputs.environment.end())
      fail("{}: {} is not set in the launcher's environment; expected NAME=VALUE, or set {} first", where, name, name);
    set_env(out, name, it->second);
  }
  return out;
}

std::string shell_quote(std::string_view value) {
  bool safe = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c != '\0' && std::strchr("_@%+=:,./-", c));
  });
  if (safe) return std::string(value);
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_exports(const EnvList& env) {
  std::string out;
  for (const auto& [name, value] : env) {
    if (!is_env_name(name)) fail("cannot export \"{}\" to a remote shell: not a variable name", name);
    out += "export " + name + "=" + shell_quote(value) + "; ";
  }
  return out;
}

Environment environment_from(char** envp) {
  Environment env;
  for (char** p = envp; p && *p; ++p) {
    std::string_view entry(*p);
    size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

}  // namespace dscpp::launcher
