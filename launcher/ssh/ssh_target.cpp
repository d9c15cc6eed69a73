// One host's login from the command line, `user@host`, the ssh config and the defaults, in
// OpenSSH's order of precedence, with OpenSSH's ~, ${VAR} and %token expansions, and the
// refusal of config options dscpp cannot honour. ProxyJump becomes the ProxyCommand OpenSSH
// itself would run (`ssh -W '[%h]:%p' JUMP`).
#include "core/error.h"
#include "launcher/hostfile.h"
#include "launcher/ssh/ssh_config.h"
#include "launcher/ssh/ssh_config_internal.h"

#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <map>

namespace dscpp::launcher {

using namespace ssh_config_internal;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// %tokens and ${VAR}, as OpenSSH expands them in the keywords that take them.
struct Expander {
  const SshLocal& local;
  std::string alias, host_name, user;
  int port = 22;

  std::string operator()(const std::string& value, const std::string& where, std::string_view keyword,
                         std::string_view tokens, bool files) const {
    std::string in = files ? expand_tilde(value, local.home, where + ": " + std::string(keyword)) : value;
    std::string out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (files && in.compare(i, 2, "${") == 0) {
        size_t close = in.find('}', i);
        if (close == std::string::npos)
          fail("{}: {} \"{}\": found \"${{\" without \"}}\"; expected ${{VARIABLE}}", where, keyword, value);
        std::string name = in.substr(i + 2, close - i - 2);
        const char* v = std::getenv(name.c_str());
        if (!v)
          fail("{}: {} \"{}\" uses ${{{}}}, which is not set in dscpp's environment; expected a set variable", where,
               keyword, value, name);
        out += v;
        i = close;
        continue;
      }
      if (in[i] != '%') {
        out += in[i];
        continue;
      }
      char t = i + 1 < in.size() ? in[++i] : '\0';
      std::string short_host = local.host_name.substr(0, local.host_name.find('.'));
      if (t == '%')
        out += '%';
      else if (t != '\0' && tokens.find(t) != std::string_view::npos)
        out += t == 'h'   ? host_name
               : t == 'n' ? alias
               : t == 'k' ? alias
               : t == 'p' ? std::to_string(port)
               : t == 'r' ? user
               : t == 'u' ? local.user
               : t == 'd' ? local.home
               : t == 'i' ? std::to_string(local.uid)
               : t == 'l' ? local.host_name
                          : short_host;  // 'L'
      else {
        std::string known = "%%";
        for (char c : tokens) known += fmt::format(", %{}", c);
        fail("{}: {} \"{}\": {} is not a token dscpp knows there; expected {}", where, keyword, value,
             t ? fmt::format("%{}", t) : std::string("a lone % at the end"), known);
      }
    }
    return out;
  }
};

constexpr std::string_view kPathTokens = "dhiklLnpru";
constexpr std::string_view kProxyTokens = "hnpr";

// OpenSSH's ProxyJump: `ssh [-l user] [-p port] [-J earlier,hops] -F config -W '[%h]:%p' host`.
// BatchMode keeps the jump login from prompting on a terminal that is not there.
std::string jump_command(const std::string& hops, const std::string& config_file) {
  size_t comma = hops.rfind(',');
  std::string last = comma == std::string::npos ? hops : hops.substr(comma + 1);
  if (last.rfind("ssh://", 0) == 0) last.erase(0, 6);
  std::string user, port;
  if (size_t at = last.rfind('@'); at != std::string::npos) user = last.substr(0, at), last.erase(0, at + 1);
  if (!last.empty() && last.front() == '[') {
    size_t close = last.find(']');
    if (close + 1 < last.size()) port = last.substr(close + 2);
    last = last.substr(1, close - 1);
  } else if (size_t colon = last.find(':'); colon != std::string::npos) {
    port = last.substr(colon + 1), last.erase(colon);
  }
  auto q = [](const std::string& s) {  // quoted for sh, with % kept from token expansion
    std::string out;
    for (char c : shell_quote(s)) out += c == '%' ? std::string("%%") : std::string(1, c);
    return out;
  };
  std::string cmd = "ssh -o BatchMode=yes";
  if (!user.empty()) cmd += " -l " + q(user);
  if (!port.empty()) cmd += " -p " + q(port);
  if (comma != std::string::npos) cmd += " -J " + q(hops.substr(0, comma));
  cmd += " -F " + q(config_file) + " -W '[%h]:%p' " + q(last);
  return cmd;
}

}  // namespace

SshLocal SshLocal::current() {
  SshLocal l;
  passwd* pw = getpwuid(getuid());
  const char* home = std::getenv("HOME");
  l.home = home && *home ? home : pw ? pw->pw_dir : "/";
  const char* user = std::getenv("USER");
  l.user = user && *user ? user : pw ? pw->pw_name : "root";
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  l.host_name = name;
  l.uid = getuid();
  return l;
}

SshTarget resolve_ssh_target(std::string_view entry, const SshOptions& o, const SshConfig& config,
                             const SshLocal& local) {
  SshTarget t;
  t.entry = entry;
  UserAtHost uh = split_user_host(entry);
  t.alias = uh.host;
  t.config_file = config.path();

  // First obtained value per keyword; every IdentityFile; ProxyJump and ProxyCommand compete.
  std::vector<const SshConfigLine*> lines = config.lines_for(t.alias), identity_lines;
  std::map<std::string, const SshConfigLine*> first;
  const SshConfigLine* proxy = nullptr;
  std::string refused;
  for (const SshConfigLine* l : lines) {
    if (l->keyword == "IdentityFile") {
      identity_lines.push_back(l);
      continue;
    }
    if ((l->keyword == "ProxyJump" || l->keyword == "ProxyCommand") && !proxy) proxy = l;
    if (!first.emplace(l->keyword, l).second) continue;
    const Keyword* k = find_keyword(l->keyword);
    if (k->use != Use::kRefused) continue;
    std::string value = l->args.empty() ? l->raw : lower(l->args[0]);
    std::string fine = k->fine ? std::string(" ") + k->fine + " " : "";
    if (!fine.empty() && fine.find(" " + value + " ") != std::string::npos) continue;
    refused += fmt::format("\n  {}: {} {}: {}", l->where(), l->keyword, l->raw, k->why);
  }
  if (!refused.empty())
    fail(
        "the ssh config {} sets options for host {} that dscpp cannot honour:{}\nExpected only options dscpp "
        "honours for the hosts it logs in to: limit these lines to other hosts (e.g. `Host * !{}`), or give dscpp a "
        "config of its own with --ssh_config FILE (--ssh_config none reads none)",
        config.path(), t.alias, refused, t.alias);
  auto value_of = [&](const char* keyword) -> const SshConfigLine* {
    auto it = first.find(keyword);
    return it == first.end() ? nullptr : it->second;
  };

  if (!o.user.empty())
    t.user = o.user, t.user_from = "--ssh_user";
  else if (!uh.user.empty())
    t.user = uh.user, t.user_from = fmt::format("'{}' (user@host)", t.entry);
  else if (const SshConfigLine* l = value_of("User"))
    t.user = l->args[0], t.user_from = l->where() + " (User)";
  else
    t.user = local.user, t.user_from = "$USER";

  if (o.port > 0)
    t.port = o.port, t.port_from = "--ssh_port";
  else if (const SshConfigLine* l = value_of("Port"))
    t.port = parse_port(l->args[0]), t.port_from = l->where() + " (Port)";
  else
    t.port = 22, t.port_from = "the default";

  Expander x{local, t.alias, t.alias, t.user, t.port};
  t.host_name = t.alias;
  if (const SshConfigLine* l = value_of("HostName")) t.host_name = x(l->args[0], l->where(), "HostName", "h", false);
  x.host_name = t.host_name;

  for (const std::string& f : o.identity_files)
    t.identity_files.push_back(x(f, "--ssh_identity", "file", kPathTokens, true));
  for (const SshConfigLine* l : identity_lines)
    t.identity_files.push_back(x(l->args[0], l->where(), "IdentityFile", kPathTokens, true));
  if (t.identity_files.empty()) {
    t.default_identities = true;
    for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"})
      t.identity_files.push_back(local.home + "/.ssh/" + name);
  }

  const SshConfigLine* only = value_of("IdentitiesOnly");
  bool identities_only = only && (lower(only->args[0]) == "yes" || lower(only->args[0]) == "true");
  const char* env_sock = std::getenv("SSH_AUTH_SOCK");
  t.agent_socket = env_sock ? env_sock : "";
  if (const SshConfigLine* l = value_of("IdentityAgent")) {
    const std::string& v = l->args[0];
    if (lower(v) == "none") {
      t.agent_socket.clear();
      t.agent_note = fmt::format("ssh-agent not asked: IdentityAgent none at {}", l->where());
    } else if (v != "SSH_AUTH_SOCK") {
      const char* var = v.front() == '$' ? std::getenv(v.c_str() + 1) : nullptr;
      t.agent_socket = v.front() == '$' ? (var ? var : "") : x(v, l->where(), "IdentityAgent", kPathTokens, true);
    }
  }
  if (!o.use_agent)
    t.agent_note.clear();
  else if (identities_only)
    t.agent_note = fmt::format(
        "ssh-agent not asked: IdentitiesOnly yes at {} (dscpp cannot pick out the agent keys that match the "
        "identity files, so it uses the files)",
        only->where());
  else if (t.agent_socket.empty() && t.agent_note.empty())
    t.agent_note = "no ssh-agent ($SSH_AUTH_SOCK is not set)";
  t.use_agent = o.use_agent && !identities_only && !t.agent_socket.empty();

  if (!o.known_hosts.empty()) {
    t.user_known_hosts = {x(o.known_hosts, "--ssh_known_hosts", "file", kPathTokens, true)};
  } else if (const SshConfigLine* l = value_of("UserKnownHostsFile")) {
    if (lower(l->args[0]) != "none")
      for (const std::string& f : l->args)
        t.user_known_hosts.push_back(x(f, l->where(), "UserKnownHostsFile", kPathTokens, true));
  } else {
    t.user_known_hosts = {local.home + "/.ssh/known_hosts", local.home + "/.ssh/known_hosts2"};
    t.default_known_hosts = true;
  }
  if (const SshConfigLine* l = value_of("GlobalKnownHostsFile")) {
    if (lower(l->args[0]) != "none")
      for (const std::string& f : l->args)
        t.global_known_hosts.push_back(x(f, l->where(), "GlobalKnownHostsFile", kPathTokens, true));
  } else {
    t.global_known_hosts = {"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"};
  }

  if (proxy && lower(proxy->args.empty() ? proxy->raw : proxy->args[0]) != "none") {
    bool jump = proxy->keyword == "ProxyJump";
    std::string command = jump ? jump_command(proxy->args[0], config.path()) : proxy->raw;
    t.proxy_command = x(command, proxy->where(), proxy->keyword, kProxyTokens, false);
    t.proxy_from = fmt::format("{} ({} {})", proxy->where(), proxy->keyword, jump ? proxy->args[0] : proxy->raw);
  }

  t.connect_timeout_seconds = 10;
  if (o.connect_timeout_seconds > 0)
    t.connect_timeout_seconds = o.connect_timeout_seconds;
  else if (const SshConfigLine* l = value_of("ConnectTimeout"); l && parse_seconds(l->args[0]) > 0)
    t.connect_timeout_seconds = parse_seconds(l->args[0]);
  if (const SshConfigLine* l = value_of("AddressFamily")) {
    std::string v = lower(l->args[0]);
    t.address_family = v == "inet" ? AF_INET : v == "inet6" ? AF_INET6 : AF_UNSPEC;
  }
  return t;
}

}  // namespace dscpp::launcher
