// Remote commands over SSH through libssh2: one session per host, logins as ~/.ssh/config
// describes them (ssh_config.h), keys from files or the agent, host keys checked against
// known_hosts, stdout/stderr streamed back, and teardown that reaches the remote process group
// even though libssh2 1.10 cannot send signals.
#pragma once

#include "launcher/env_export.h"  // shell_quote
#include "launcher/launch_plan.h"
#include "launcher/supervisor/rank_exit.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dscpp::launcher {

// What the command line says about logging in. Each value that is set overrides `user@host` and
// the ssh_config file (ssh_config.h), which override the defaults: as OpenSSH's precedence.
struct SshOptions {
  std::string user;                         // --ssh_user; "" = user@host, then User, then $USER
  int port = 0;                             // --ssh_port; 0 = Port, then 22
  std::vector<std::string> identity_files;  // --ssh_identity: tried before IdentityFile lines
  std::string known_hosts;                  // --ssh_known_hosts: instead of UserKnownHostsFile
  std::string config_file;                  // --ssh_config; "" = ~/.ssh/config, "none" = no file
  bool use_agent = true;                    // try ssh-agent keys first (not with IdentitiesOnly yes)
  double connect_timeout_seconds = 0;       // TCP connect per address; 0 = ConnectTimeout, then 10
  double login_timeout_seconds = 60;        // connected -> command started (handshake, auth, exec)
};
// Keys: the agent's, then each identity file in order; missing files are skipped (and listed
// as such in the error). A passphrase-protected key is decrypted with $DSCPP_SSH_PASSPHRASE.
// libssh2 1.10 signs RSA user auth with SHA-1 "ssh-rsa", which OpenSSH >= 8.8 refuses unless
// the server sets `PubkeyAcceptedAlgorithms +ssh-rsa`: prefer ed25519 or ECDSA keys.
// A host may be given as `user@host`; Host patterns of the config match the part after '@'.

struct RemoteCommand {
  std::string host;     // [user@]name: a name or address, or a Host alias of the ssh config
  std::string command;  // run by /bin/sh -c on the remote host (whatever the login shell is)
  EnvList env;          // sent with the command (as `export` prefixes; sshd's AcceptEnv is not needed)
  // false: stdin is /dev/null and a stop TERMs the command's process group at once.
  // true: the command keeps the channel's stdin and stops itself on its EOF (a dscpp node agent
  // with stop_fd = 0); its group is TERMed only if it is still running grace_seconds later.
  bool watches_stdin = false;
  // > 0: the command is a node agent running that many ranks; its stderr carries their exit
  // reports (launcher/supervisor/rank_exit.h), which are taken out of the relayed output and
  // decide which rank the run blames.
  int reported_ranks = 0;
  // Run first, in the same session, so that checking a host costs no login of its own: its
  // stdout and stderr (up to a marker line, gate_prefix) go to RemoteRunOptions::gate instead of
  // being relayed, and `command` starts only when the gate has let every host go. "" = none.
  std::string check{};
  // Variables whose values must not appear on the remote command line, where every user of the
  // host can read them (/proc/PID/cmdline): each value is written as one line on the channel's
  // stdin, read into the variable and exported by the remote shell before anything else runs
  // (stdin_env_prefix). Values must be one line.
  EnvList stdin_env{};
};

struct RemoteExit {
  std::string host;
  int exit_code = 0;   // the command's code; 128+N when killed by signal N; 255 when `error` is set
  std::string signal;  // e.g. "TERM" when killed by a signal
  // Empty when the command ran to its exit. Otherwise a connection/host-key/auth failure, a
  // lost connection, "not started: ..." (stopped before it ran) or "did not exit within ..."
  // (its connection was dropped after the grace period).
  std::string error;
  std::string describe() const;  // "host node2 exited with code 3", "... was killed by signal TERM"
};

// What ssh_capture_all returns per host, and what RemoteRunOptions::gate is given per host.
struct RemoteCapture {
  RemoteExit exit;
  std::string out, err;  // the command's stdout and stderr
  // "" when the command exited 0; else the error with host and remedy (as ssh_capture throws).
  std::string failure(const std::string& command, const std::string& user = "") const;
};

struct RemoteRunOptions {
  int stop_fd = -1;  // readable or EOF = stop every host
  // When stop_fd fires: the run's exit code and why, for the message (default 143, "stop requested").
  std::function<std::pair<int, std::string>()> stop_reason;
  int out_fd = 1;
  int err_fd = 2;
  double grace_seconds = 5.0;  // remote TERM -> KILL (watches_stdin: EOF -> TERM -> KILL); then
                               // sessions still open 2 s later are dropped
  bool prefix_host = false;    // prefix relayed lines with "[host] "
  // For commands with a `check`: called once, when each of them has finished its check or
  // failed (login, lost connection, exit before the check's end), with one RemoteCapture per
  // command in input order: the check's stdout and stderr, and `exit` with the failure of a host
  // that failed (else empty). "" starts every command (`go` on its stdin); anything else starts
  // none: every host gets EOF and the run ends with RemoteRunResult::refused set to it. A host
  // that fails before this decision is reported only through the gate.
  std::function<std::string(const std::vector<RemoteCapture>&)> gate;
};

struct RemoteRunResult {
  int exit_code = 0;  // 0, the blamed failure's status, or 143 when stopped through stop_fd
  // The rank blamed (Blame's rule over every host's reports), when a rank failed; else the
  // first host that failed without its ranks having reported (login, lost connection, crash).
  std::optional<RankExit> rank_failure;
  std::optional<RemoteExit> first_failure;
  std::string failure;  // the blamed failure, described, when exit_code != 0 and not stopped
  bool stopped = false;
  std::string refused;            // the gate's answer when it let no command start (exit_code 1)
  std::vector<RemoteExit> exits;  // one per host, in input order
};

// Runs every command at once, relays output (whole lines, in order per stream), and on the
// first non-zero exit stops the other hosts' commands (their whole process group).
// All sessions share one poll() loop (no thread per host). Each command runs as
// `remote_command_line(command, env, watches_stdin, check)`: a stdin-EOF watchdog TERMs the
// remote process group when we send EOF, when the connection drops, or when this process dies.
// Commands with a `check` start only once the gate lets them (RemoteRunOptions::gate). Teardown (first
// failure, lost connection, or stop_fd readable/EOF): message on err_fd, EOF to every other
// host, up to grace_seconds for them to exit, then their sessions are dropped. When a command
// exits, whatever it left running in its process group is TERMed too (nothing outlives it). Throws
// dscpp::Error only for invalid input (an environment name a shell cannot export).
RemoteRunResult run_remote(const std::vector<RemoteCommand>& commands, const SshOptions& ssh,
                           const RemoteRunOptions& options);

// Connects, authenticates and runs `command`, returning its stdout (for pre-flight checks:
// a host's own address from `hostname -I`, a port's state). Throws dscpp::Error naming host and remedy.
std::string ssh_capture(const std::string& host, const std::string& command, const SshOptions& ssh);


// ssh_capture on every host at once (one poll loop, logins in parallel): for pre-flight checks
// of all hosts. Never throws for a host's failure and never stops the others: every result says
// what happened, so all failing hosts can be reported together.
std::vector<RemoteCapture> ssh_capture_all(const std::vector<RemoteCommand>& commands, const SshOptions& ssh);

// The exact line sent to sshd for `command` with `env`: the watchdog wrapper around
// `export K='v'; ...; command`, run by /bin/sh whatever the login shell is (for --dry-run).
std::string remote_command_line(const std::string& command, const EnvList& env, bool watches_stdin = false,
                                const std::string& check = "", const EnvList& stdin_env = {});

// What the remote shell runs first for RemoteCommand::stdin_env: `IFS= read -r NAME || exit 0;
// export NAME; ` per variable (a stop before the values arrive starts nothing).
std::string stdin_env_prefix(const EnvList& stdin_env);

// What runs before the command when it has a `check` (and before the watchdog starts, which
// would otherwise race the command for the `go` line on stdin): the check in a subshell, the
// marker line on stdout and stderr, then one line read from stdin; anything but `go`, or EOF,
// exits 0 without starting the command. Ends with "; " (for --dry_run: check, then command).
std::string gate_prefix(const std::string& check);

}  // namespace dscpp::launcher
