// The user's ssh_config (~/.ssh/config, or --ssh_config FILE) read as OpenSSH reads it, and the
// resolution of one host's login from the command line, `user@host` and that file. Pure (no
// libssh2, no sockets) so that every rule can be unit-tested; the login code uses SshTarget.
//
// Honoured: Host (patterns with * ? and !negation), Include, IgnoreUnknown, HostName, User,
// Port, IdentityFile, IdentitiesOnly, IdentityAgent, UserKnownHostsFile, GlobalKnownHostsFile,
// ProxyJump, ProxyCommand, ConnectTimeout, AddressFamily, StrictHostKeyChecking yes/ask.
// Refused, naming file:line, when they apply to a host dscpp logs in to: options whose effect
// dscpp cannot reproduce (certificates, connection sharing, forwardings, algorithm lists, ...).
// `Match` is refused wherever it is, since which lines it selects cannot be known. Options that
// only concern interactive sessions are ignored. The tables are in ssh_config.cpp.
#pragma once

#include "launcher/ssh/ssh.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher {

// One keyword line as written.
struct SshConfigLine {
  std::string keyword;            // canonical spelling, e.g. "IdentityFile"
  std::vector<std::string> args;  // split and unquoted as OpenSSH does
  std::string raw;                // the rest of the line as written (ProxyCommand takes it whole)
  std::string file;
  int line = 0;
  std::string where() const { return file + ":" + std::to_string(line); }
};

// A parsed config file with its Includes. Every parse error throws dscpp::Error naming
// file:line, what was expected and what was found; an unknown keyword names the closest one.
class SshConfig {
 public:
  SshConfig();  // no file: nothing applies

  // `path` is only used in messages and as the file handed to ProxyJump's `ssh -F`. `home` is
  // what `~` means; relative Include paths start in `home`/.ssh, as OpenSSH's do.
  static SshConfig parse(std::string_view text, const std::string& path, const std::string& home);
  // Reads and parses `path`. A missing file is an empty config unless `must_exist`.
  static SshConfig load(const std::string& path, const std::string& home, bool must_exist);

  // The lines that apply to `host` (as given, without `user@`), in file order with Includes
  // expanded. OpenSSH takes the first value obtained for each keyword (IdentityFile: all).
  std::vector<const SshConfigLine*> lines_for(std::string_view host) const;

  const std::string& path() const { return path_; }  // "" when no file was read

  struct File;

 private:
  std::string path_;
  std::shared_ptr<const File> root_;
};

// Who runs dscpp: what `~`, %u, %d, %i and %l mean, and the default user.
struct SshLocal {
  std::string home, user, host_name;
  unsigned uid = 0;
  static SshLocal current();  // $HOME and $USER, else the passwd entry; gethostname()
};

// Everything needed to log in to one host, with where the user and port came from.
struct SshTarget {
  std::string entry;            // as given, e.g. "bob@node1"
  std::string alias;            // without "user@": what Host patterns match (OpenSSH's %n)
  std::string host_name;        // HostName, else alias: connected to and looked up in known_hosts
  std::string user, user_from;  // user_from: "--ssh_user", "user@host", "FILE:LINE (User)", "$USER"
  int port = 22;
  std::string port_from;                    // "--ssh_port", "FILE:LINE (Port)" or "the default"
  std::vector<std::string> identity_files;  // --ssh_identity, then IdentityFile lines, else defaults
  bool default_identities = false;          // no file was named: ~/.ssh/id_{ed25519,ecdsa,rsa}
  bool use_agent = false;                   // ask the agent at agent_socket first
  std::string agent_socket;
  std::string agent_note;  // why the agent is not asked, for the auth error
  std::vector<std::string> user_known_hosts, global_known_hosts;
  bool default_known_hosts = false;  // user_known_hosts are ~/.ssh/known_hosts{,2}: none was named
  std::string proxy_command;         // expanded, run by /bin/sh; "" = connect directly
  std::string proxy_from;            // "FILE:LINE (ProxyJump)" and the like
  double connect_timeout_seconds = 10;
  int address_family = 0;   // AF_UNSPEC, AF_INET or AF_INET6
  std::string config_file;  // the file read, for messages ("" = none)
};

// Precedence as OpenSSH's: command line (SshOptions) > `user@` of the entry > the config file
// (first obtained value) > defaults. Throws dscpp::Error for an option the config applies to
// this host that dscpp refuses, or a value whose %token or ${VAR} cannot be expanded.
SshTarget resolve_ssh_target(std::string_view entry, const SshOptions& options, const SshConfig& config,
                             const SshLocal& local);

// OpenSSH's pattern match: `*` any run of characters, `?` one character.
bool ssh_pattern_match(std::string_view text, std::string_view pattern);

}  // namespace dscpp::launcher
