// ssh_config as OpenSSH's readconf.c reads it: keyword and arguments split by argv_split's
// rules (quotes, backslash escapes, `#` comments, `Key=value`), Host blocks, Include with globs
// and its activation rules, and the keyword table that decides what dscpp honours, refuses or
// ignores. The resolution of one host's login from it is in ssh_target.cpp.
#include "launcher/ssh/ssh_config.h"

#include "configs/load.h"  // closest_match
#include "core/error.h"
#include "launcher/ssh/ssh_config_internal.h"

#include <glob.h>
#include <pwd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dscpp::launcher {

struct SshConfig::File {
  struct Entry {
    enum Kind { kHost, kLine, kInclude } kind = kLine;
    SshConfigLine line;          // kHost: args are the patterns
    std::vector<File> included;  // kInclude: the files it named, in glob order
  };
  std::vector<Entry> entries;
};

namespace ssh_config_internal {
namespace {

constexpr const char* kForwards = "dscpp opens no port forwardings";
constexpr const char* kAlgorithms =
    "dscpp negotiates with libssh2's own algorithm lists and cannot apply this one, so the connection "
    "would not be what this line asks for";
constexpr const char* kSharing =
    "dscpp opens its own connections and cannot use an OpenSSH master connection, so a login that "
    "relies on one (a second factor, say) would not happen as here";

// Every keyword OpenSSH 9 knows (and some it still accepts as deprecated), with what dscpp does.
const Keyword kKeywords[] = {
    {"Host", Use::kHonoured},
    {"Match", Use::kHonoured},
    {"Include", Use::kHonoured},
    {"IgnoreUnknown", Use::kHonoured},
    {"HostName", Use::kHonoured},
    {"User", Use::kHonoured},
    {"Port", Use::kHonoured},
    {"IdentityFile", Use::kHonoured},
    {"IdentitiesOnly", Use::kHonoured},
    {"IdentityAgent", Use::kHonoured},
    {"UserKnownHostsFile", Use::kHonoured},
    {"GlobalKnownHostsFile", Use::kHonoured},
    {"ProxyJump", Use::kHonoured},
    {"ProxyCommand", Use::kHonoured},
    {"ConnectTimeout", Use::kHonoured},
    {"AddressFamily", Use::kHonoured},
    {"StrictHostKeyChecking", Use::kRefused, "yes true ask",
     "dscpp never accepts a host key that is not in known_hosts (as with `yes`); add the hosts' keys "
     "after checking their fingerprints: ssh-keyscan HOST >> ~/.ssh/known_hosts"},
    {"CanonicalizeHostname", Use::kRefused, "no false",
     "dscpp does not canonicalize host names, so other Host blocks would apply than with OpenSSH"},
    {"ControlMaster", Use::kRefused, "no false", kSharing},
    {"ControlPath", Use::kRefused, "none", kSharing},
    {"PKCS11Provider", Use::kRefused, "none",
     "libssh2 cannot use PKCS#11 tokens; load the token's keys into ssh-agent (ssh-add -s PROVIDER)"},
    {"Tunnel", Use::kRefused, "no false", "dscpp opens no tunnel devices"},
    {"RemoteCommand", Use::kRefused, "none", "dscpp runs its own command on every host"},
    {"ProxyUseFdpass", Use::kRefused, "no false", "dscpp talks to a ProxyCommand over its stdin and stdout"},
    {"PubkeyAuthentication", Use::kRefused, "yes true unbound host-bound", "dscpp logs in with public keys only"},
    {"CertificateFile", Use::kRefused, nullptr, "libssh2 1.10 cannot log in with certificates"},
    {"HostKeyAlias", Use::kRefused, nullptr, "dscpp looks host keys up under the name it connects to"},
    {"LocalForward", Use::kRefused, nullptr, kForwards},
    {"RemoteForward", Use::kRefused, nullptr, kForwards},
    {"DynamicForward", Use::kRefused, nullptr, kForwards},
    {"KnownHostsCommand", Use::kRefused, nullptr, "dscpp reads host keys from known_hosts files only"},
    {"RevokedHostKeys", Use::kRefused, nullptr,
     "dscpp honours only @revoked lines of known_hosts files, not a revocation file"},
    {"BindAddress", Use::kRefused, nullptr, "dscpp connects from the default source address"},
    {"BindInterface", Use::kRefused, nullptr, "dscpp connects from the default source address"},
    {"SmartcardDevice", Use::kRefused, nullptr, "libssh2 cannot use smartcards"},
    {"Ciphers", Use::kRefused, nullptr, kAlgorithms},
    {"MACs", Use::kRefused, nullptr, kAlgorithms},
    {"KexAlgorithms", Use::kRefused, nullptr, kAlgorithms},
    {"HostKeyAlgorithms", Use::kRefused, nullptr, kAlgorithms},
    {"PubkeyAcceptedAlgorithms", Use::kRefused, nullptr, kAlgorithms},
    {"PubkeyAcceptedKeyTypes", Use::kRefused, nullptr, kAlgorithms},
    {"CASignatureAlgorithms", Use::kRefused, nullptr, kAlgorithms},
};

// Interactive sessions, other authentication methods, logging, keep-alives, forwarding of the
// agent or X11, host-key recording: nothing a non-interactive key login depends on.
constexpr const char* kIgnored =
    "AddKeysToAgent BatchMode CanonicalDomains CanonicalizeFallbackLocal CanonicalizeMaxDots "
    "CanonicalizePermittedCNAMEs ChallengeResponseAuthentication ChannelTimeout CheckHostIP "
    "ClearAllForwardings Compression CompressionLevel ConnectionAttempts ControlPersist "
    "EnableEscapeCommandline EnableSSHKeysign EscapeChar ExitOnForwardFailure FingerprintHash "
    "ForkAfterAuthentication ForwardAgent ForwardX11 ForwardX11Timeout ForwardX11Trusted GatewayPorts "
    "GSSAPIAuthentication GSSAPIClientIdentity GSSAPIDelegateCredentials GSSAPIKexAlgorithms "
    "GSSAPIKeyExchange GSSAPIRenewalForcesRekey GSSAPIServerIdentity GSSAPITrustDns HashKnownHosts "
    "HostbasedAcceptedAlgorithms HostbasedAuthentication HostbasedKeyTypes IPQoS "
    "KbdInteractiveAuthentication KbdInteractiveDevices LocalCommand LogLevel LogVerbose "
    "NoHostAuthenticationForLocalhost NumberOfPasswordPrompts ObscureKeystrokeTiming "
    "PasswordAuthentication PermitLocalCommand PermitRemoteOpen PreferredAuthentications Protocol "
    "RekeyLimit RequestTTY RequiredRSASize RhostsRSAAuthentication RSAAuthentication SecurityKeyProvider "
    "SendEnv ServerAliveCountMax ServerAliveInterval SessionType SetEnv StdinNull StreamLocalBindMask "
    "StreamLocalBindUnlink Tag TCPKeepAlive TunnelDevice UpdateHostKeys UseKeychain UsePrivilegedPort "
    "UseRoaming VerifyHostKeyDNS VisualHostKey XAuthLocation Cipher FallBackToRsh UseRsh";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\n';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// OpenSSH's argv_split: whitespace separates, "..." and '...' group, a backslash escapes a quote,
// a backslash or (outside quotes) a space, and a `#` starting a word ends the line.
std::vector<std::string> split_args(std::string_view s, const std::string& where) {
  std::vector<std::string> args;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == '\t') {
      ++i;
      continue;
    }
    if (s[i] == '#') break;
    std::string arg;
    char quote = 0;
    for (; i < s.size(); ++i) {
      char c = s[i];
      if (c == '\\' && i + 1 < s.size() &&
          (s[i + 1] == '\'' || s[i + 1] == '"' || s[i + 1] == '\\' || (!quote && s[i + 1] == ' ')))
        arg += s[++i];
      else if (!quote && (c == ' ' || c == '\t'))
        break;
      else if (!quote && (c == '"' || c == '\''))
        quote = c;
      else if (quote && c == quote)
        quote = 0;
      else
        arg += c;
    }
    if (quote)
      fail("{}: found an opening {} with no closing one in \"{}\"; expected matching quotes around a value", where,
           quote, s);
    args.push_back(std::move(arg));
  }
  return args;
}

bool is_yes_no(const std::string& v) {
  std::string l = lower(v);
  return l == "yes" || l == "no" || l == "true" || l == "false";
}

// [ssh://][user@]host[:port]: one hop of ProxyJump, as OpenSSH's parse_ssh_uri/parse_user_host_port.
void check_jump_hop(std::string_view hop, const SshConfigLine& l) {
  if (hop.substr(0, 6) == "ssh://") hop.remove_prefix(6);
  if (size_t at = hop.rfind('@'); at != std::string_view::npos) {
    if (at == 0) fail("{}: ProxyJump hop \"{}\" has an empty user; expected [user@]host[:port]", l.where(), hop);
    hop.remove_prefix(at + 1);
  }
  std::string_view port;
  if (!hop.empty() && hop.front() == '[') {
    size_t close = hop.find(']');
    if (close == std::string_view::npos)
      fail("{}: ProxyJump hop \"{}\" opens '[' without ']'; expected [user@][address]:port", l.where(), hop);
    if (close + 1 < hop.size()) {
      if (hop[close + 1] != ':') fail("{}: ProxyJump hop \"{}\": expected ':' after ']'", l.where(), hop);
      port = hop.substr(close + 2);
    }
    hop = hop.substr(1, close - 1);
  } else if (size_t colon = hop.find(':'); colon != std::string_view::npos) {
    port = hop.substr(colon + 1);
    hop = hop.substr(0, colon);
  }
  if (hop.empty()) fail("{}: ProxyJump hop without a host name; expected [user@]host[:port][,...]", l.where());
  if (!port.empty() && parse_port(port) == 0)
    fail("{}: ProxyJump hop port \"{}\"; expected a number from 1 to 65535", l.where(), port);
}

// What a known keyword's value must look like; throws naming the line.
void check_value(const Keyword& k, const SshConfigLine& l) {
  std::string name = k.name;
  auto want = [&](size_t n, const char* what) {
    if (l.args.size() < n) fail("{}: {} has no value; expected {}", l.where(), name, what);
    if (l.args[0].empty()) fail("{}: {} has an empty value (\"\"); expected {}", l.where(), name, what);
    if (n == 1 && l.args.size() > 1 && name != "Host" && name != "Include" && name.find("KnownHostsFile") == name.npos)
      fail("{}: {} has {} values (\"{}\"); expected one: {}", l.where(), name, l.args.size(), l.raw, what);
  };
  if (name == "Host") want(1, "one or more host patterns (*, ?, !negated)");
  if (name == "Include") want(1, "one or more file names or globs");
  if (name == "HostName") want(1, "a host name or address");
  if (name == "User") want(1, "a user name");
  if (name == "IdentityFile") want(1, "a private key file");
  if (name == "IdentityAgent") want(1, "none, SSH_AUTH_SOCK, $VARIABLE or a socket path");
  if (name == "IgnoreUnknown") want(1, "a comma-separated list of keyword patterns");
  if (name == "UserKnownHostsFile" || name == "GlobalKnownHostsFile") want(1, "one or more files, or none");
  if (name == "ProxyCommand" && l.raw.empty())
    fail("{}: ProxyCommand has no value; expected a command or none", l.where());
  if (name == "Port") {
    want(1, "a port number");
    if (parse_port(l.args[0]) == 0) fail("{}: Port \"{}\"; expected a number from 1 to 65535", l.where(), l.args[0]);
  }
  if (name == "IdentitiesOnly") {
    want(1, "yes or no");
    if (!is_yes_no(l.args[0])) fail("{}: IdentitiesOnly \"{}\"; expected yes or no", l.where(), l.args[0]);
  }
  if (name == "AddressFamily") {
    want(1, "any, inet or inet6");
    std::string v = lower(l.args[0]);
    if (v != "any" && v != "inet" && v != "inet6")
      fail("{}: AddressFamily \"{}\"; expected any, inet or inet6", l.where(), l.args[0]);
  }
  if (name == "ConnectTimeout") {
    want(1, "seconds (e.g. 10, 1m30s) or none");
    if (lower(l.args[0]) != "none" && parse_seconds(l.args[0]) < 0)
      fail("{}: ConnectTimeout \"{}\"; expected seconds such as 10 or 1m30s, or none", l.where(), l.args[0]);
  }
  if (name == "ProxyJump") {
    want(1, "none or [user@]host[:port][,...]");
    if (lower(l.args[0]) != "none") {
      std::string_view hops = l.args[0];
      for (size_t pos = 0;;) {
        size_t comma = hops.find(',', pos);
        check_jump_hop(hops.substr(pos, comma == hops.npos ? hops.npos : comma - pos), l);
        if (comma == hops.npos) break;
        pos = comma + 1;
      }
    }
  }
}

std::string read_text(const std::string& path, std::string* why) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path, ec)) {
    *why = in ? "it is a directory" : std::strerror(errno);
    return {};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Parser {
  std::string home;
  std::vector<std::string> ignore_unknown;  // IgnoreUnknown patterns seen so far, lowercase

  void parse(std::string_view text, const std::string& path, SshConfig::File& out, int depth);

  void include(const SshConfigLine& l, SshConfig::File::Entry& entry, int depth) {
    if (depth >= 16)
      fail("{}: Include nested more than 16 files deep; expected no Include loop (a file including itself)", l.where());
    for (const std::string& arg : l.args) {
      std::string pattern = expand_tilde(arg, home, l.where() + ": Include");
      if (pattern.front() != '/') pattern = home + "/.ssh/" + pattern;
      glob_t g{};
      int rc = glob(pattern.c_str(), 0, nullptr, &g);
      std::vector<std::string> files(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
      globfree(&g);
      for (const std::string& f : files) {  // glob sorts them, as OpenSSH reads them
        std::string why, text = read_text(f, &why);
        if (!why.empty())
          fail("{}: Include {}: cannot read {} ({}); expected a readable ssh_config file", l.where(), arg, f, why);
        entry.included.emplace_back();
        parse(text, f, entry.included.back(), depth + 1);
      }
    }
  }
};

void Parser::parse(std::string_view text, const std::string& path, SshConfig::File& out, int depth) {
  int line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view s = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    if (s.empty() || s.front() == '#') continue;
    size_t kw_end = 0;
    while (kw_end < s.size() && !is_space(s[kw_end]) && s[kw_end] != '=') ++kw_end;
    std::string written(s.substr(0, kw_end));
    std::string_view rest = s.substr(kw_end);
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    if (!rest.empty() && rest.front() == '=') rest.remove_prefix(1);
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    SshConfigLine l{written, {}, std::string(rest), path, line_no};
    const Keyword* k = find_keyword(written);
    if (!k) {
      std::string lw = lower(written);
      if (std::any_of(ignore_unknown.begin(), ignore_unknown.end(),
                      [&](const std::string& p) { return ssh_pattern_match(lw, p); }))
        continue;
      std::vector<std::string> names;
      for (const Keyword& c : keywords()) names.push_back(c.name);
      std::string close = config::closest_match(written, names);
      fail(
          "{}: found the unknown keyword \"{}\"{}; expected an ssh_config keyword (man ssh_config). One that "
          "only a newer OpenSSH knows can be skipped with `IgnoreUnknown {}` above this line",
          l.where(), written, close.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", close), written);
    }
    l.keyword = k->name;
    if (l.keyword == "Match")
      fail(
          "{}: found a Match block (\"Match {}\"); dscpp does not evaluate Match conditions, so it cannot tell "
          "which of the lines below apply to a host. Expected Host blocks only: rewrite it as Host blocks, or give "
          "dscpp a config of its own with --ssh_config FILE (--ssh_config none reads none)",
          l.where(), l.raw);
    if (k->use == Use::kIgnored) continue;
    if (l.keyword != "ProxyCommand" && l.keyword != "RemoteCommand" && l.keyword != "KnownHostsCommand")
      l.args = split_args(rest, l.where());
    else if (lower(rest).substr(0, 4) == "none" && (rest.size() == 4 || is_space(rest[4])))
      l.args = {"none"};
    check_value(*k, l);
    if (l.keyword == "IgnoreUnknown") {
      std::string_view list = l.args[0];
      for (size_t p = 0;;) {
        size_t comma = list.find(',', p);
        ignore_unknown.push_back(lower(list.substr(p, comma == list.npos ? list.npos : comma - p)));
        if (comma == list.npos) break;
        p = comma + 1;
      }
    }
    SshConfig::File::Entry entry;
    entry.kind = l.keyword == "Host"      ? SshConfig::File::Entry::kHost
                 : l.keyword == "Include" ? SshConfig::File::Entry::kInclude
                                          : SshConfig::File::Entry::kLine;
    if (entry.kind == SshConfig::File::Entry::kInclude) include(l, entry, depth);
    entry.line = std::move(l);
    out.entries.push_back(std::move(entry));
  }
}

bool host_matches(const std::vector<std::string>& patterns, std::string_view host) {
  bool any = false;
  for (const std::string& p : patterns) {
    bool negated = !p.empty() && p.front() == '!';
    if (ssh_pattern_match(host, negated ? std::string_view(p).substr(1) : std::string_view(p))) {
      if (negated) return false;  // a matching negation vetoes the whole line, as in OpenSSH
      any = true;
    }
  }
  return any;
}

// OpenSSH's activation rules: a Host line switches the rest of its file on or off; an Include
// under an inactive Host reads nothing, and the including file's state resumes after it.
void walk(const SshConfig::File& f, std::string_view host, bool can_match, std::vector<const SshConfigLine*>& out) {
  bool active = can_match;
  for (const auto& e : f.entries) {
    if (e.kind == SshConfig::File::Entry::kHost)
      active = can_match && host_matches(e.line.args, host);
    else if (e.kind == SshConfig::File::Entry::kInclude)
      for (const auto& sub : e.included) walk(sub, host, active, out);
    else if (active)
      out.push_back(&e.line);
  }
}

}  // namespace

const std::vector<Keyword>& keywords() {
  static const std::vector<Keyword> all = [] {
    std::vector<Keyword> v(std::begin(kKeywords), std::end(kKeywords));
    static std::vector<std::string> ignored;  // owns the names the table points to
    std::istringstream words(kIgnored);
    for (std::string w; words >> w;) ignored.push_back(w);
    for (const std::string& name : ignored) v.push_back({name.c_str()});
    return v;
  }();
  return all;
}

const Keyword* find_keyword(std::string_view name) {
  std::string l = lower(name);
  for (const Keyword& k : keywords())
    if (lower(k.name) == l) return &k;
  return nullptr;
}

int parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  int v = std::stoi(std::string(s));
  return v >= 1 && v <= 65535 ? v : 0;
}

// OpenSSH's convtime: runs of digits, each optionally followed by s, m, h, d or w.
double parse_seconds(std::string_view s) {
  if (s.empty()) return -1;
  double total = 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i || j - i > 9) return -1;
    double v = std::stod(std::string(s.substr(i, j - i)));
    double unit = 1;
    if (j < s.size()) {
      switch (std::tolower(static_cast<unsigned char>(s[j]))) {
        case 's':
          unit = 1;
          break;
        case 'm':
          unit = 60;
          break;
        case 'h':
          unit = 3600;
          break;
        case 'd':
          unit = 86400;
          break;
        case 'w':
          unit = 604800;
          break;
        default:
          return -1;
      }
      ++j;
    }
    total += v * unit;
    i = j;
  }
  return total;
}

std::string expand_tilde(const std::string& value, const std::string& home, const std::string& where) {
  if (value.empty() || value.front() != '~') return value;
  size_t slash = value.find('/');
  std::string name = value.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  std::string rest = slash == std::string::npos ? "" : value.substr(slash);
  if (name.empty()) return home + rest;
  passwd* pw = getpwnam(name.c_str());
  if (!pw)
    fail("{}: \"{}\" names the home of user '{}', who does not exist here; expected ~/ or ~USER/", where, value, name);
  return pw->pw_dir + rest;
}

}  // namespace ssh_config_internal

using namespace ssh_config_internal;

SshConfig::SshConfig() : root_(std::make_shared<File>()) {}

SshConfig SshConfig::parse(std::string_view text, const std::string& path, const std::string& home) {
  auto root = std::make_shared<File>();
  Parser parser{home, {}};
  parser.parse(text, path, *root, 0);
  SshConfig c;
  c.path_ = path;
  c.root_ = std::move(root);
  return c;
}

SshConfig SshConfig::load(const std::string& path, const std::string& home, bool must_exist) {
  std::error_code ec;
  if (!must_exist && !std::filesystem::exists(path, ec)) return SshConfig();
  std::string why, text = read_text(path, &why);
  if (!why.empty())
    fail(
        "cannot read the ssh config file {} ({}); expected an ssh_config file (--ssh_config FILE, or none to read "
        "no file)",
        path, why);
  return parse(text, path, home);
}

std::vector<const SshConfigLine*> SshConfig::lines_for(std::string_view host) const {
  std::vector<const SshConfigLine*> out;
  walk(*root_, lower(host), true, out);
  return out;
}

bool ssh_pattern_match(std::string_view text, std::string_view pattern) {
  size_t t = 0, p = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++t, ++p;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace dscpp::launcher
