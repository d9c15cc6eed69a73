// ~/.ssh/config as OpenSSH reads it, and one host's login resolved from the command line,
// user@host and that file (launcher/ssh/ssh_config.h); user@host in hostfiles and -i/-e.
#include "core/error.h"
#include "launcher/hostfile.h"
#include "launcher/resources.h"
#include "launcher/ssh/ssh_config.h"

#include <catch2/catch.hpp>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace dscpp::launcher;
using Catch::Contains;

namespace {

const SshLocal kLocal{"/home/u", "u", "here.example.org", 1000};

SshConfig cfg(const std::string& text) {
  return SshConfig::parse(text, "/home/u/.ssh/config", "/home/u");
}
SshTarget target(const std::string& entry, const std::string& text, SshOptions o = {}) {
  return resolve_ssh_target(entry, o, cfg(text), kLocal);
}
std::string parse_error(const std::string& text) {
  try {
    cfg(text);
  } catch (const dscpp::Error& e) {
    return e.what();
  }
  return "(no error)";
}
std::string resolve_error(const std::string& entry, const std::string& text) {
  try {
    target(entry, text);
  } catch (const dscpp::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A scratch HOME for Include, removed at the end of the test case.
struct TempHome {
  std::filesystem::path dir;
  TempHome() {
    char name[] = "/tmp/dscpp-sshcfg-XXXXXX";
    dir = mkdtemp(name);
    std::filesystem::create_directories(dir / ".ssh" / "conf.d");
  }
  ~TempHome() { std::filesystem::remove_all(dir); }
  void write(const std::string& rel, const std::string& text) const { std::ofstream(dir / rel) << text; }
};

}  // namespace

TEST_CASE("ssh config: first obtained value wins, Host * gives defaults, keywords in any case", "[ssh_config]") {
  std::string text =
      "# comment\n"
      "Host node1\n"
      "  hostname 10.0.0.1\n"
      "  USER alice\n"
      "  Port=2201\n"
      "Host node*\n"
      "  User bob\n"
      "  Port 2202\n"
      "  IdentityFile ~/.ssh/node_key\n"
      "Host *\n"
      "  User carol\n"
      "  IdentityFile = \"/keys/with space\"\n"
      "  ConnectTimeout 1m30s\n";
  SshTarget t = target("node1", text);
  CHECK(t.host_name == "10.0.0.1");
  CHECK(t.user == "alice");
  CHECK(t.user_from == "/home/u/.ssh/config:4 (User)");
  CHECK(t.port == 2201);
  CHECK(t.port_from == "/home/u/.ssh/config:5 (Port)");
  // every IdentityFile that applies, in file order, ~ expanded; quotes removed
  CHECK(t.identity_files == std::vector<std::string>{"/home/u/.ssh/node_key", "/keys/with space"});
  CHECK_FALSE(t.default_identities);
  CHECK(t.connect_timeout_seconds == 90);

  t = target("node7", text);
  CHECK(t.host_name == "node7");
  CHECK(t.user == "bob");
  CHECK(t.port == 2202);
  t = target("other", text);
  CHECK(t.user == "carol");
  CHECK(t.port == 22);
  CHECK(t.port_from == "the default");
  CHECK(t.identity_files == std::vector<std::string>{"/keys/with space"});

  t = target("x", "");
  CHECK(t.user == "u");
  CHECK(t.user_from == "$USER");
  CHECK(t.default_identities);
  CHECK(t.identity_files.front() == "/home/u/.ssh/id_ed25519");
  CHECK(t.user_known_hosts == std::vector<std::string>{"/home/u/.ssh/known_hosts", "/home/u/.ssh/known_hosts2"});
  CHECK(t.global_known_hosts.front() == "/etc/ssh/ssh_known_hosts");
  CHECK(t.connect_timeout_seconds == 10);
}

TEST_CASE("ssh config: patterns with * and ?, !negation, several per line", "[ssh_config]") {
  CHECK(ssh_pattern_match("node12", "node*"));
  CHECK(ssh_pattern_match("node1", "node?"));
  CHECK_FALSE(ssh_pattern_match("node12", "node?"));
  CHECK(ssh_pattern_match("a.b.example.com", "*.example.com"));
  CHECK_FALSE(ssh_pattern_match("example.com", "*.example.com"));
  CHECK(ssh_pattern_match("", "*"));
  std::string text =
      "Host gpu* !gpu-login cpu?\n"
      "  User worker\n"
      "Host !*.internal\n"  // a line of negations alone never matches
      "  User never\n";
  CHECK(target("gpu3", text).user == "worker");
  CHECK(target("cpu1", text).user == "worker");
  CHECK(target("gpu-login", text).user == "u");
  CHECK(target("cpu12", text).user == "u");
  CHECK(target("other", text).user == "u");
  // host names are matched in lower case, as ssh lowercases its destination
  CHECK(target("GPU3", text).user == "worker");
}

TEST_CASE("ssh config: precedence is command line > user@host > config > defaults", "[ssh_config]") {
  std::string text = "Host n*\n  User cfguser\n  Port 2222\n  IdentityFile /k/cfg\n  UserKnownHostsFile /kh/a /kh/b\n";
  SshTarget t = target("root@n1", text);
  CHECK(t.user == "root");
  CHECK(t.user_from == "'root@n1' (user@host)");
  CHECK(t.alias == "n1");  // Host patterns match the name without the user
  CHECK(t.port == 2222);
  CHECK(t.user_known_hosts == std::vector<std::string>{"/kh/a", "/kh/b"});
  SshOptions o;
  o.user = "flaguser";
  o.port = 2022;
  o.identity_files = {"/k/flag"};
  o.known_hosts = "/kh/flag";
  t = target("root@n1", text, o);
  CHECK(t.user == "flaguser");
  CHECK(t.user_from == "--ssh_user");
  CHECK(t.port == 2022);
  CHECK(t.port_from == "--ssh_port");
  CHECK(t.identity_files == std::vector<std::string>{"/k/flag", "/k/cfg"});  // as ssh -i: first, not instead
  CHECK(t.user_known_hosts == std::vector<std::string>{"/kh/flag"});
  // a user name holding '@' (split at the last one, as ssh does)
  CHECK(target("jo@corp@n1", text).user == "jo@corp");
}

TEST_CASE("ssh config: %tokens and ~ where OpenSSH expands them", "[ssh_config]") {
  std::string text =
      "Host n1\n"
      "  HostName %h.cluster\n"
      "  User svc\n"
      "  Port 2200\n"
      "  IdentityFile ~/.ssh/%r@%h-%p\n"
      "  IdentityFile %d/keys/%u/%n_%%\n"
      "  UserKnownHostsFile ~/kh/%h\n";
  SshTarget t = target("n1", text);
  CHECK(t.host_name == "n1.cluster");
  CHECK(t.identity_files == std::vector<std::string>{"/home/u/.ssh/svc@n1.cluster-2200", "/home/u/keys/u/n1_%"});
  CHECK(t.user_known_hosts == std::vector<std::string>{"/home/u/kh/n1.cluster"});
  CHECK_THROWS_WITH(target("n1", "Host *\n  IdentityFile ~/.ssh/%Q\n"),
                    Contains("/home/u/.ssh/config:2: IdentityFile \"~/.ssh/%Q\": %Q is not a token dscpp knows") &&
                        Contains("expected %%, %d, %h"));
  CHECK_THROWS_WITH(target("n1", "Host *\n  HostName %p.x\n"),
                    Contains("config:2: HostName \"%p.x\": %p is not a token"));
  setenv("DSCPP_TEST_KEYDIR", "/env/keys", 1);
  CHECK(target("n1", "IdentityFile ${DSCPP_TEST_KEYDIR}/id\n").identity_files ==
        std::vector<std::string>{"/env/keys/id"});
  unsetenv("DSCPP_TEST_KEYDIR");
  CHECK_THROWS_WITH(target("n1", "IdentityFile ${DSCPP_TEST_KEYDIR}/id\n"),
                    Contains("config:1: IdentityFile") && Contains("${DSCPP_TEST_KEYDIR}, which is not set"));
}

TEST_CASE("ssh config: Include relative to ~/.ssh, with globs, inside Host blocks", "[ssh_config]") {
  TempHome home;
  home.write(".ssh/conf.d/10-a.conf", "Host a1\n  User from-a\n");
  home.write(".ssh/conf.d/20-b.conf", "Host b1\n  User from-b\nHost *\n  Port 2200\n");
  home.write(".ssh/only-n1.conf", "IdentityFile /k/n1\n");
  std::string text =
      "Include conf.d/*.conf\n"
      "Host n1\n"
      "  Include only-n1.conf\n"
      "  User n1user\n"  // the including block's state resumes after the Include
      "Host *\n"
      "  User default\n"
      "  Include no-such-*.conf\n";
  SshConfig c = SshConfig::parse(text, (home.dir / ".ssh/config").string(), home.dir.string());
  SshLocal local = kLocal;
  local.home = home.dir.string();
  auto t = [&](const char* host) { return resolve_ssh_target(host, {}, c, local); };
  CHECK(t("a1").user == "from-a");
  CHECK(t("b1").user == "from-b");
  CHECK(t("b1").port == 2200);
  CHECK(t("n1").user == "n1user");
  CHECK(t("n1").identity_files == std::vector<std::string>{"/k/n1"});
  CHECK(t("n2").user == "default");
  CHECK(t("n2").port == 2200);  // the included file's Host * applies to every host
  CHECK(t("n2").default_identities);
  // an Include under a Host that does not match reads nothing, not even its own Host * lines
  home.write(".ssh/star.conf", "Host *\n  User from-star\n");
  c = SshConfig::parse("Host nomatch\n  Include star.conf\n", "cfg", home.dir.string());
  CHECK(resolve_ssh_target("x", {}, c, local).user == "u");
  home.write(".ssh/loop.conf", "Include loop.conf\n");
  CHECK_THROWS_WITH(SshConfig::parse("Include loop.conf\n", "cfg", home.dir.string()),
                    Contains("loop.conf:1: Include nested more than 16 files deep"));
  home.write(".ssh/bad.conf", "\n\nPort x\n");
  CHECK_THROWS_WITH(SshConfig::parse("Include bad.conf\n", "cfg", home.dir.string()),
                    Contains(".ssh/bad.conf:3: Port \"x\"; expected a number from 1 to 65535"));
}

TEST_CASE("ssh config: parse errors name file:line, what was expected and what was found", "[ssh_config]") {
  CHECK(parse_error("Host *\n  Hostnme x\n") ==
        "/home/u/.ssh/config:2: found the unknown keyword \"Hostnme\" (did you mean \"HostName\"?); expected an "
        "ssh_config keyword (man ssh_config). One that only a newer OpenSSH knows can be skipped with `IgnoreUnknown "
        "Hostnme` above this line");
  CHECK(parse_error("IgnoreUnknown Fancy*,Other\nHost *\n  FancyNewOption yes\n  Other 1\n") == "(no error)");
  CHECK_THAT(parse_error("Host a\n\n  Match host b\n  User c\n"),
             Contains("/home/u/.ssh/config:3: found a Match block (\"Match host b\")") &&
                 Contains("rewrite it as Host blocks") && Contains("--ssh_config"));
  CHECK_THAT(parse_error("Port 0\n"), Contains("config:1: Port \"0\"; expected a number from 1 to 65535"));
  CHECK_THAT(parse_error("User\n"), Contains("config:1: User has no value; expected a user name"));
  CHECK_THAT(parse_error("User a b\n"), Contains("config:1: User has 2 values (\"a b\"); expected one"));
  CHECK_THAT(parse_error("IdentityFile \"/k/a b\n"),
             Contains("config:1: found an opening \" with no closing one") && Contains("expected matching quotes"));
  CHECK_THAT(parse_error("IdentitiesOnly maybe\n"), Contains("config:1: IdentitiesOnly \"maybe\"; expected yes or no"));
  CHECK_THAT(parse_error("ConnectTimeout soon\n"), Contains("config:1: ConnectTimeout \"soon\"; expected seconds"));
  CHECK_THAT(parse_error("ProxyJump a,@b\n"), Contains("config:1: ProxyJump hop \"@b\" has an empty user"));
  CHECK_THAT(parse_error("Host\n"), Contains("config:1: Host has no value; expected one or more host patterns"));
  // quotes, escapes and comments as OpenSSH's argv_split
  CHECK(target("h", "IdentityFile '/a b'/c\\ d # trailing comment\n").identity_files ==
        std::vector<std::string>{"/a b/c d"});
}

TEST_CASE("ssh config: options dscpp cannot honour are refused for the hosts they apply to", "[ssh_config]") {
  std::string text =
      "Host bastion\n"
      "  ControlMaster auto\n"
      "  ControlPath ~/.ssh/cm-%r@%h:%p\n"
      "  LocalForward 8080 localhost:80\n"
      "Host n*\n"
      "  StrictHostKeyChecking yes\n"
      "Host *\n"
      "  StrictHostKeyChecking accept-new\n"
      "  ForwardAgent yes\n"
      "  ServerAliveInterval 30\n"
      "  SendEnv LANG LC_*\n"
      "  UseKeychain yes\n"
      "  AddKeysToAgent yes\n";
  CHECK_NOTHROW(target("n1", text));  // ignored keywords; the first StrictHostKeyChecking (yes) wins
  std::string e = resolve_error("other", text);
  CHECK_THAT(e, Contains("the ssh config /home/u/.ssh/config sets options for host other that dscpp cannot honour") &&
                    Contains("/home/u/.ssh/config:8: StrictHostKeyChecking accept-new: dscpp never accepts a host "
                             "key that is not in known_hosts") &&
                    Contains("`Host * !other`"));
  e = resolve_error("bastion", text);
  CHECK_THAT(e, Contains("config:2: ControlMaster auto: dscpp opens its own connections") &&
                    Contains("config:3: ControlPath") && Contains("config:4: LocalForward 8080 localhost:80") &&
                    Contains("config:8: StrictHostKeyChecking accept-new"));
  CHECK_NOTHROW(target("h", "ControlMaster no\nControlPath none\nCanonicalizeHostname no\nPKCS11Provider none\n"));
  CHECK_THAT(resolve_error("h", "CertificateFile ~/.ssh/id_ed25519-cert.pub\n"),
             Contains("config:1: CertificateFile ~/.ssh/id_ed25519-cert.pub: libssh2 1.10 cannot log in with "
                      "certificates"));
  CHECK_THAT(resolve_error("h", "HostKeyAlias other\n"), Contains("config:1: HostKeyAlias other"));
  CHECK_THAT(resolve_error("h", "CanonicalizeHostname yes\n"), Contains("config:1: CanonicalizeHostname yes"));
  CHECK_THAT(resolve_error("h", "PKCS11Provider /usr/lib/opensc.so\n"), Contains("cannot use PKCS#11"));
}

TEST_CASE("ssh config: ProxyJump is OpenSSH's ssh -W, ProxyCommand gets its tokens", "[ssh_config]") {
  SshTarget t = target("n3", "Host n3\n  HostName node3\n  Port 2200\n  ProxyJump admin@jump1:2022\n");
  CHECK(t.proxy_command == "ssh -o BatchMode=yes -l admin -p 2022 -F /home/u/.ssh/config -W '[node3]:2200' jump1");
  CHECK(t.proxy_from == "/home/u/.ssh/config:4 (ProxyJump admin@jump1:2022)");
  t = target("n3", "ProxyJump j1,ssh://bob@j2\n");
  CHECK(t.proxy_command == "ssh -o BatchMode=yes -l bob -J j1 -F /home/u/.ssh/config -W '[n3]:22' j2");
  t = target("n3", "Host n3\n  ProxyCommand nc -X connect -x proxy:3128 %h %p # %r\n  User r\n");
  CHECK(t.proxy_command == "nc -X connect -x proxy:3128 n3 22 # r");
  // ProxyJump and ProxyCommand compete: the first one obtained wins, `none` included
  CHECK(target("n3", "Host n3\n  ProxyJump none\nHost *\n  ProxyJump j\n").proxy_command.empty());
  CHECK(target("n3", "Host n3\n  ProxyCommand none\nHost *\n  ProxyJump j\n").proxy_command.empty());
  CHECK(target("n3", "ProxyCommand nc %h %p\nProxyJump j\n").proxy_command == "nc n3 22");
  CHECK(target("n3", "").proxy_command.empty());
}

TEST_CASE("ssh config: the agent, IdentitiesOnly and IdentityAgent", "[ssh_config]") {
  setenv("SSH_AUTH_SOCK", "/tmp/agent.sock", 1);
  SshTarget t = target("h", "");
  CHECK(t.use_agent);
  CHECK(t.agent_socket == "/tmp/agent.sock");
  t = target("h", "IdentitiesOnly yes\nIdentityFile /k/a\n");
  CHECK_FALSE(t.use_agent);
  CHECK_THAT(t.agent_note, Contains("IdentitiesOnly yes at /home/u/.ssh/config:1"));
  t = target("h", "IdentityAgent ~/agent-%u.sock\n");
  CHECK(t.agent_socket == "/home/u/agent-u.sock");
  CHECK_FALSE(target("h", "IdentityAgent none\n").use_agent);
  SshOptions no_agent;
  no_agent.use_agent = false;
  CHECK_FALSE(target("h", "", no_agent).use_agent);
  unsetenv("SSH_AUTH_SOCK");
  t = target("h", "");
  CHECK_FALSE(t.use_agent);
  CHECK(t.agent_note == "no ssh-agent ($SSH_AUTH_SOCK is not set)");
}

TEST_CASE("ssh config: a missing default file is no config, a named one must exist", "[ssh_config]") {
  CHECK(SshConfig::load("/nonexistent/.ssh/config", "/home/u", false).path().empty());
  CHECK_THROWS_WITH(SshConfig::load("/nonexistent/cfg", "/home/u", true),
                    Contains("cannot read the ssh config file /nonexistent/cfg (No such file or directory)"));
}

TEST_CASE("user@host entries in the hostfile and in --include/--exclude", "[launcher][ssh_config]") {
  CHECK(split_user_host("bob@node1").user == "bob");
  CHECK(split_user_host("bob@node1").host == "node1");
  CHECK(split_user_host("node1").user.empty());
  CHECK(host_name_of("a@b@node1") == "node1");

  ResourcePool pool = parse_hostfile("bob@node1 slots=2\nnode2 slots=2\n", "hf");
  CHECK(pool[0].host == "bob@node1");  // kept as written: the SSH layer splits it
  CHECK_THROWS_WITH(parse_hostfile("bob@node1 slots=1\nalice@node1 slots=1\n", "hf"),
                    Contains("hf:2: found host \"alice@node1\" again (first listed on line 1 as \"bob@node1\")"));
  CHECK_THROWS_WITH(parse_hostfile("@node1 slots=1\n", "hf"),
                    Contains("hf:1: found host \"@node1\" with an empty user before '@'"));
  CHECK_THROWS_WITH(parse_hostfile("bob@ slots=1\n", "hf"), Contains("with an empty host name after '@'"));

  // -i names hosts with or without the hostfile's user@; a user given there must agree
  ResourcePool a = include_resources(pool, "node1:1@node2", "hf");
  REQUIRE(a.size() == 2);
  CHECK(a[0].host == "bob@node1");
  CHECK(a[0].slots == std::vector<int>{1});
  a = include_resources(pool, "bob@node1@carol@node2:0", "hf");
  REQUIRE(a.size() == 2);
  CHECK(a[0].host == "bob@node1");
  CHECK(a[1].host == "carol@node2");  // -i's user logs in where the hostfile names none
  CHECK(a[1].slots == std::vector<int>{0});
  CHECK_THROWS_WITH(include_resources(pool, "alice@node1", "hf"),
                    Contains("--include \"alice@node1\": found alice@node1, but hf lists that host as 'bob@node1'"));
  a = exclude_resources(pool, "bob@node1", "hf");
  REQUIRE(a.size() == 1);
  CHECK(a[0].host == "node2");
  CHECK(exclude_resources(pool, "node1:0", "hf")[0].host == "bob@node1");
}
