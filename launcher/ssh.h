// Remote commands over SSH through libssh2: one session per host, keys from ~/.ssh or the
// agent, host keys checked against known_hosts, stdout/stderr streamed back, and teardown
// that reaches the remote process group even though libssh2 1.10 cannot send signals.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/world.h"

namespace dscpp::launcher {

struct SshOptions {
  std::string user;                         // default: $USER (or root)
  int port = 22;
  std::vector<std::string> identity_files;  // default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa
  std::string known_hosts;                  // default: ~/.ssh/known_hosts
  bool use_agent = true;                    // try ssh-agent keys first when SSH_AUTH_SOCK is set
  double connect_timeout_seconds = 10;
};

struct RemoteCommand {
  std::string host;     // name or address to connect to
  std::string command;  // run by the remote user's shell
  EnvList env;          // sent with the command (as `export` prefixes; sshd's AcceptEnv is not needed)
};

struct RemoteExit {
  std::string host;
  int exit_code = 0;
  std::string signal;  // e.g. "TERM" when killed by a signal
  std::string error;   // connection/auth failure, empty when the command ran
};

struct RemoteRunOptions {
  int stop_fd = -1;  // readable or EOF = stop every host
  int out_fd = 1;
  int err_fd = 2;
  double grace_seconds = 5.0;
};

struct RemoteRunResult {
  int exit_code = 0;
  std::optional<RemoteExit> first_failure;
  bool stopped = false;
  std::vector<RemoteExit> exits;  // one per host, in input order
};

// Runs every command at once, relays output (whole lines, in order per stream), and on the
// first non-zero exit stops the other hosts' commands (their whole process group).
RemoteRunResult run_remote(const std::vector<RemoteCommand>& commands, const SshOptions& ssh,
                           const RemoteRunOptions& options);

// Connects, authenticates and runs `command`, returning its stdout (for pre-flight checks:
// reachability, `sha256sum` of binaries). Throws dscpp::Error naming host and remedy.
std::string ssh_capture(const std::string& host, const std::string& command, const SshOptions& ssh);

}  // namespace dscpp::launcher
