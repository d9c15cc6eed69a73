// The SSH starter on libssh2 1.10. Every host is a small state machine (connect, handshake and
// host-key check, public-key auth, exec, stream, close) driven without blocking from one
// poll() loop, so N hosts log in concurrently without a thread each.
//
// Teardown: libssh2 1.10 cannot send a signal over a channel, so each command runs under a
// stdin-EOF watchdog (remote_command_line): our channel EOF, a dropped connection or our own
// death closes the remote stdin, and the watchdog TERMs the remote process group, then KILLs
// whatever is left once the command's leader is gone (or after the grace period).
//
// This file holds the poll() loop over all hosts and the public entry points; one host's state
// machine is HostSession (ssh_internal.h: login in ssh_login.cpp, the command in ssh_channel.cpp),
// and the known_hosts check is in ssh_host_key.cpp.
#include "launcher/ssh/ssh.h"

#include "core/error.h"
#include "launcher/ssh/ssh_internal.h"

#include <libssh2.h>
#include <poll.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>

namespace dscpp::launcher {

using ssh_internal::after;
using ssh_internal::Clock;
using ssh_internal::HostSession;
using ssh_internal::kCheckDone;
using ssh_internal::Login;
using ssh_internal::resolve;
using ssh_internal::write_all;

namespace {

void init_libssh2() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (libssh2_init(0) != 0) fail("libssh2_init failed: its crypto backend could not start");
  });
}

bool failed(const RemoteExit& e) {
  return e.exit_code != 0 || !e.signal.empty() || !e.error.empty();
}

// The remote watchdog KILLs at grace_seconds; waiting a little longer lets that exit be reported
// instead of dropping the connection of a host that did exit.
constexpr double kReportMargin = 2.0;

// What the gate is given: each host's check output, with the failure of a host that has ended.
std::vector<RemoteCapture> check_results(const std::vector<std::unique_ptr<HostSession>>& hosts) {
  std::vector<RemoteCapture> got;
  for (const auto& h : hosts) {
    RemoteCapture c = h->check_output();
    if (h->done()) {
      c.exit = h->exit();
      if (!failed(c.exit)) c.exit.error = "its command ended before it was told to start", c.exit.exit_code = 255;
    } else {
      c.exit.host = h->exit().host;
    }
    got.push_back(std::move(c));
  }
  return got;
}

// The one poll() loop over all hosts, with the stop/teardown rules of run_remote.
// `stop_seconds`: how long stopped hosts get before their connections are dropped. Capturing
// (pre-flight checks) is silent and lets every host finish: each one's failure is reported.
RemoteRunResult drive(std::vector<std::unique_ptr<HostSession>>& hosts, const RemoteRunOptions& options,
                      double stop_seconds, bool capturing) {
  RemoteRunResult result;
  bool stopping = false, stop_fd_open = options.stop_fd >= 0;
  Clock::time_point grace_end = Clock::time_point::max();
  std::vector<bool> reported(hosts.size(), false);
  // Until the gate decides, hosts that fail are reported through it, all together.
  bool gating = options.gate && std::any_of(hosts.begin(), hosts.end(), [](auto& h) { return h->gated(); });
  Blame blame;  // over the ranks' exit reports from every host
  auto say = [&](const std::string& text) {
    if (!capturing) write_all(options.err_fd, "dscpp: " + text + "\n");
  };
  auto others_running = [&] { return std::any_of(hosts.begin(), hosts.end(), [](auto& h) { return !h->done(); }); };
  auto begin_stop = [&](const std::string& reason) {
    stopping = true;
    grace_end = after(stop_seconds);
    for (auto& h : hosts) h->stop(reason);
  };
  auto blame_rank = [&](const Blame::Verdict& v) {
    result.rank_failure = v.exit;
    result.failure = v.describe();
    result.exit_code = v.exit.status();
    say(result.failure + (others_running() ? "; stopping the other hosts" : ""));
    begin_stop(fmt::format("stopped after rank {} failed", v.exit.rank));
  };
  for (;;) {
    bool progress = false;
    size_t active = 0;
    for (size_t i = 0; i < hosts.size(); ++i) {
      if (!hosts[i]->done()) progress |= hosts[i]->step();
      for (const RankExit& report : hosts[i]->take_reports())
        if (auto v = stopping || capturing ? std::nullopt : blame.exited(report)) blame_rank(*v);
      if (hosts[i]->done() && !reported[i] && !gating) {
        reported[i] = true;
        const RemoteExit& e = hosts[i]->exit();
        // A host whose ranks all reported has said why through them; its agent's own code adds
        // nothing (and a bystander's code 3 must not pre-empt the wait for the real failure).
        bool told = e.error.empty() && hosts[i]->all_reported();
        if (!stopping && !capturing && failed(e) && !told) {
          result.first_failure = e;
          result.failure = e.describe();
          result.exit_code = e.exit_code;
          say(e.describe() + (others_running() ? "; stopping the other hosts" : ""));
          begin_stop(fmt::format("stopped after {} failed", e.host));
        }
      }
      active += hosts[i]->done() ? 0 : 1;
    }
    if (gating && !stopping &&
        std::all_of(hosts.begin(), hosts.end(), [](auto& h) { return !h->gated() || h->at_gate(); })) {
      gating = false;
      result.refused = options.gate(check_results(hosts));
      if (result.refused.empty()) {
        for (auto& h : hosts) h->let_go();
      } else {
        result.failure = result.refused;
        result.exit_code = 1;
        begin_stop("not started: the check before it failed");
      }
      continue;  // step every host again: each now has `go` or EOF to send
    }
    if (!stopping && !capturing)
      if (auto v = blame.due(active == 0)) blame_rank(*v);
    if (active == 0) break;
    if (stopping && Clock::now() >= grace_end) {
      for (auto& h : hosts)
        if (!h->done()) {
          say(
              fmt::format("host {} did not exit within {} s of the stop; dropping its connection (its watchdog "
                          "kills the remote process group)",
                          h->exit().host, stop_seconds));
          h->drop(fmt::format("did not exit within {} s of the stop; connection dropped", stop_seconds));
        }
      continue;
    }
    std::vector<pollfd> fds;
    Clock::time_point wake = std::min(grace_end, blame.deadline().value_or(Clock::time_point::max()));
    for (auto& h : hosts)
      if (!h->done() && h->fd() >= 0)
        fds.push_back({h->fd(), h->poll_events(), 0}), wake = std::min(wake, h->deadline());
    if (stop_fd_open) fds.push_back({options.stop_fd, POLLIN, 0});
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    int timeout = progress ? 0 : static_cast<int>(std::clamp<long long>(ms, 0, 1000));
    if (::poll(fds.data(), fds.size(), timeout) > 0 && stop_fd_open && fds.back().revents) {
      stop_fd_open = false;
      if (!stopping) {
        auto [code, why] =
            options.stop_reason ? options.stop_reason() : std::pair<int, std::string>{143, "stop requested"};
        result.stopped = true;
        result.exit_code = code;
        say(why + "; stopping all hosts");
        begin_stop(why);
      }
    }
  }
  for (auto& h : hosts) result.exits.push_back(h->exit());
  return result;
}

}  // namespace

std::string RemoteExit::describe() const {
  if (!error.empty()) return fmt::format("host {} failed: {}", host, error);
  if (!signal.empty()) return fmt::format("host {} was killed by signal {}", host, signal);
  return fmt::format("host {} exited with code {}", host, exit_code);
}

namespace {
std::string watchdog_line(const std::string& command, const EnvList& env, double grace_seconds, bool watches_stdin,
                          const std::string& check, const EnvList& stdin_env) {
  std::string inner;
  for (const auto& [name, value] : env) {
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
              std::all_of(name.begin(), name.end(),
                          [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (!ok) fail("environment variable name '{}' cannot be exported by a POSIX shell (letters, digits, '_')", name);
    inner += fmt::format("export {}={}; ", name, shell_quote(value));
  }
  inner += command;
  // fd 3 keeps the channel's stdin for the watchdog (`cat` returns at its EOF); the command
  // gets /dev/null unless it watches stdin itself. `w` waits up to the grace period while the
  // command's leader ($$: exec keeps the pid) exists and is not a zombie (containers often
  // lack a reaping init). After EOF: [wait,] TERM the group, wait, KILL what is left. The
  // watchdog ignores TERM to live that long; a command that exited normally leaves nothing.
  // It is forked twice so that it is not a child of the command (a node agent that reaps and
  // waits for all its descendants would otherwise wait for it); it stays in the group.
  int ticks = std::max(1, static_cast<int>(std::lround(grace_seconds * 10)));
  // The stdin variables and a check come before the watchdog forks: its `cat` would race them
  // for their lines.
  std::string wrapper = stdin_env_prefix(stdin_env) + (check.empty() ? "" : gate_prefix(check));
  wrapper += fmt::format(
      "exec 3<&0; ( (trap '' TERM; w() {{ n=0; while [ $n -lt {} ] && read -r s </proc/$$/stat; do "
      "case ${{s##*) }} in Z*) return;; esac; sleep 0.1; n=$((n+1)); done; }}; cat <&3; {}kill -TERM 0; w; "
      "kill -KILL 0) >/dev/null 2>&1 & ); exec /bin/sh -c {}{} 3<&-",
      ticks, watches_stdin ? "w; " : "", shell_quote(inner), watches_stdin ? "" : " </dev/null");
  return "exec /bin/sh -c " + shell_quote(wrapper);
}
}  // namespace

std::string remote_command_line(const std::string& command, const EnvList& env, bool watches_stdin,
                                const std::string& check, const EnvList& stdin_env) {
  return watchdog_line(command, env, RemoteRunOptions{}.grace_seconds, watches_stdin, check, stdin_env);
}

std::string stdin_env_prefix(const EnvList& stdin_env) {
  std::string out;
  for (const auto& [name, value] : stdin_env) {
    if (!is_env_name(name)) fail("cannot pass \"{}\" to a remote shell: not a variable name", name);
    // Like `go`, read one byte at a time, so what follows stays on stdin for the next reader.
    out += fmt::format("IFS= read -r {} || exit 0; export {}; ", name, name);
  }
  return out;
}

std::string gate_prefix(const std::string& check) {
  // `read` takes one byte at a time from a pipe or socket (dash and bash alike), so what follows
  // `go` on stdin, the EOF the command stops on, stays for the command.
  return fmt::format("({}); echo {}; echo {} >&2; IFS= read -r go && [ \"$go\" = go ] || exit 0; ", check, kCheckDone,
                     kCheckDone);
}

RemoteRunResult run_remote(const std::vector<RemoteCommand>& commands, const SshOptions& ssh,
                           const RemoteRunOptions& options) {
  init_libssh2();
  Login login = resolve(ssh);
  std::vector<std::unique_ptr<HostSession>> hosts;
  for (const RemoteCommand& c : commands) {
    hosts.push_back(std::make_unique<HostSession>(
        c, watchdog_line(c.command, c.env, options.grace_seconds, c.watches_stdin, c.check, c.stdin_env), login,
        &options, nullptr));
    if (!c.check.empty()) hosts.back()->expect_check();
  }
  // the remote watchdog KILLs at grace (watches_stdin: 2 x grace) after EOF
  bool two_stage = std::any_of(commands.begin(), commands.end(), [](auto& c) { return c.watches_stdin; });
  return drive(hosts, options, options.grace_seconds * (two_stage ? 2 : 1) + kReportMargin, false);
}

std::vector<RemoteCapture> ssh_capture_all(const std::vector<RemoteCommand>& commands, const SshOptions& ssh) {
  init_libssh2();
  Login login = resolve(ssh);
  RemoteRunOptions options;
  std::vector<RemoteCapture> results(commands.size());
  std::vector<std::unique_ptr<HostSession>> hosts;
  for (size_t i = 0; i < commands.size(); ++i) {
    const RemoteCommand& c = commands[i];
    hosts.push_back(
        std::make_unique<HostSession>(c, watchdog_line(c.command, c.env, options.grace_seconds, false, "", c.stdin_env),
                                      login, &options, &results[i]));
  }
  RemoteRunResult r = drive(hosts, options, options.grace_seconds + kReportMargin, true);
  for (size_t i = 0; i < commands.size(); ++i) results[i].exit = r.exits[i];
  return results;
}

std::string RemoteCapture::failure(const std::string& command, const std::string& user) const {
  if (!exit.error.empty()) return exit.error;
  if (exit.exit_code == 0 && exit.signal.empty()) return "";
  std::string text = err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return fmt::format(
      "on {}: `{}` {}{}{}; run it there by hand to see why: ssh {}{} {}", exit.host, command,
      exit.signal.empty() ? fmt::format("exited with code {}", exit.exit_code) : "was killed by signal " + exit.signal,
      text.empty() ? "" : ": ", text, user.empty() ? "" : user + "@", exit.host, shell_quote(command));
}

std::string ssh_capture(const std::string& host, const std::string& command, const SshOptions& ssh) {
  RemoteCapture c = ssh_capture_all({RemoteCommand{host, command, {}}}, ssh).at(0);
  // `ssh HOST` finds the same user dscpp used (user@HOST, the config), unless --ssh_user chose it.
  std::string why = c.failure(command, ssh.user);
  if (!why.empty()) throw Error(why);
  return c.out;
}

}  // namespace dscpp::launcher
