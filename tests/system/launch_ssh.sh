#!/usr/bin/env bash
# System test of the SSH starter (launcher/ssh/) against real sshd "hosts": network
# namespaces brought up by the project's testbed (tests/testbed/netns-hosts.sh). Drives
# run_remote/ssh_capture through tests/ssh_run_check, and `dscpp --hostfile` once the launcher
# CLI has it.
#   launch_ssh.sh DSCPP_EXE SOURCE_ROOT
# The testbed scripts come from SOURCE_ROOT/tests/testbed, or from $DSCPP_TESTBED when set.
# Needs root, `ip netns` and OpenSSH (scripts/setup.sh test); exits 77 (skip) otherwise.
set -uo pipefail

DSCPP=$1
SRC=$2
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, sshd)"
ip netns list >/dev/null 2>&1 || skip "needs iproute2 with 'ip netns'"
[ -x /usr/sbin/sshd ] && command -v ssh >/dev/null || skip "needs openssh-server and openssh-client"
T=${DSCPP_TESTBED:-$SRC/tests/testbed}/netns-hosts.sh
[ -x "$T" ] || { echo "FAIL: testbed script $T missing or not executable"; exit 1; }
RUN=${SSH_RUN_CHECK:-$(dirname "$DSCPP")/../tests/ssh_run_check}
[ -x "$RUN" ] || { echo "FAIL: ssh_run_check not built at $RUN"; exit 1; }

# Our own testbed: name, subnet and state dir of this run, always taken down.
. "$(dirname "$0")/netns_testbed.sh"
testbed_up dsl 10.252 3
read -r IP1 IP2 IP3 <<<"$TESTBED_IPS"

fails=0
ok() { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }
R() { "$RUN" --no-agent --key "$TESTBED_KEY" --known_hosts "$TESTBED_KNOWN_HOSTS" "$@"; }

# Per-node token programs: a symlink to sleep under $W/nI/, so `pgrep -f $W/n[I]/` finds every
# remote process of a test (the sh wrappers carry the path in their command lines too).
for i in 1 2 3; do mkdir -p "$W/n$i"; ln -s "$(command -v sleep)" "$W/n$i/sleep"; done
S1=$W/n1/sleep S2=$W/n2/sleep S3=$W/n3/sleep
left_on() { "$T" exec "node$1" pgrep -f "$W/n[$1]/" 2>/dev/null | wc -l; }
# all_gone SECONDS: polls every node until none of our processes is left
all_gone() {
  local t0 i n
  t0=$(now)
  while :; do
    n=0
    for i in 1 2 3; do n=$((n + $(left_on $i))); done
    [ $n = 0 ] && { gone_after=$(printf '%.1f' "$(elapsed "$t0")"); return 0; }
    [ "$(echo "$(elapsed "$t0") > $1" | bc)" = 1 ] && return 1
    sleep 0.2
  done
}

# 1. Output: whole lines, in order per host and stream; 9 sessions (3 per host) in one loop.
gen='i=1; while [ $i -le 150 ]; do printf "%s-out-%d-%s\n" "$(hostname)" $i "$X"; printf "%s-err-%d\n" "$(hostname)" $i >&2; i=$((i+1)); done; printf "part-"; sleep 0.2; echo "whole"; printf "no-newline-at-end"'
X=$(printf 'x%.0s' $(seq 1 2000))
args=()
for ip in $TESTBED_IPS $TESTBED_IPS $TESTBED_IPS; do args+=("$ip" "$gen"); done
R --prefix --env "X=$X" "${args[@]}" >"$W/out" 2>"$W/err"
rc=$?
good=1
for i in 1 2 3; do
  ip=$(echo "$TESTBED_IPS" | cut -d' ' -f$i)
  exp_out=$(for k in $(seq 1 150); do echo "[$ip] node$i-out-$k-$X"; done; echo "[$ip] part-whole"; echo "[$ip] no-newline-at-end")
  exp_err=$(for k in $(seq 1 150); do echo "[$ip] node$i-err-$k"; done)
  # three sessions per host interleave with each other, but each one's lines stay whole and in order:
  # every expected line appears exactly 3 times, and the first copies keep the order
  [ "$(grep -c "^\[$ip\] " "$W/out")" = 456 ] || good=0
  [ "$(grep "^\[$ip\] " "$W/out" | sort | uniq -c | awk '$1 != 3' | wc -l)" = 0 ] || good=0
  [ "$(grep "^\[$ip\] " "$W/out" | awk '!seen[$0]++')" = "$exp_out" ] || good=0
  [ "$(grep "^\[$ip\] " "$W/err" | awk '!seen[$0]++')" = "$exp_err" ] || good=0
done
[ $rc = 0 ] && [ $good = 1 ] && [ "$(grep -vc '^\[' "$W/out")" = 0 ] &&
  ok "9 sessions on 3 hosts: 1368 stdout lines of 2 KB and 1350 stderr lines, whole and in order per host" ||
  { bad "output relay (rc=$rc)"; head -c 600 "$W/err"; }

# 2. One host exits 4: the others (sleep 60, one with a background child) are stopped.
t0=$(now)
R "$IP1" "$S1 60" "$IP2" "sleep 0.5; exit 4" "$IP3" "$S3 60 & $S3 61; wait" >"$W/out" 2>"$W/err"
rc=$?
t=$(printf '%.1f' "$(elapsed "$t0")")
if [ $rc = 4 ] && grep -q "^dscpp: host $IP2 exited with code 4; stopping the other hosts$" "$W/err" &&
   grep -q "host=$IP1 exit_code=143 signal=TERM" "$W/err" && grep -q "host=$IP3 exit_code=143 signal=TERM" "$W/err" &&
   grep -q "first_failure=$IP2" "$W/err"; then
  ok "host 2 exit 4 -> exit code 4, others TERMed, run took ${t} s"
else bad "first-failure stop (rc=$rc)"; cat "$W/err"; fi
all_gone 5 && ok "no remote process left after the stop (checked on every node, ${gone_after} s)" || bad "processes left after the stop"

# 3. The local side dies (SIGKILL): the watchdogs see the connections drop.
"$RUN" --no-agent --key "$TESTBED_KEY" --known_hosts "$TESTBED_KNOWN_HOSTS" \
  "$IP1" "$S1 60 & $S1 61; wait" "$IP2" "$S2 60" "$IP3" "sh -c 'trap \"\" TERM; $S3 62' & $S3 63; wait" >/dev/null 2>&1 &
pid=$!  # ssh_run_check itself, not a subshell
t0=$(now)
until [ "$(left_on 1)" -ge 2 ] && [ "$(left_on 2)" -ge 1 ] && [ "$(left_on 3)" -ge 3 ]; do
  [ "$(echo "$(elapsed "$t0") > 15" | bc)" = 1 ] && break
  sleep 0.2
done
kill -9 $pid
wait $pid 2>/dev/null
all_gone 5 && ok "SIGKILL of the local process: every remote process gone (a TERM-ignoring child too) in ${gone_after} s" ||
  bad "remote processes left after SIGKILL of the local process"

# 4. stop_fd: its EOF stops everything; result says stopped.
(sleep 1.5) | R --stop-on-stdin "$IP1" "$S1 60" "$IP2" "$S2 60" "$IP3" "$S3 60" >/dev/null 2>"$W/err"
rc=$?
[ $rc = 143 ] && grep -q "stopped=1" "$W/err" && grep -q "dscpp: stop requested" "$W/err" &&
  ok "stop_fd EOF -> all hosts TERMed, exit 143, stopped=1" || { bad "stop_fd (rc=$rc)"; cat "$W/err"; }
all_gone 5 && ok "no remote process left after stop_fd (${gone_after} s)" || bad "processes left after stop_fd"

# 4b. watches_stdin: the command gets the EOF itself and may exit its own way; one that ignores
# it is TERMed grace_seconds later.
t0=$(now)
(sleep 1) | R --stop-on-stdin --watches-stdin --grace 1 "$IP1" 'read x; echo "graceful $(hostname)"; exit 7' \
  "$IP2" "$S2 60" >"$W/out" 2>"$W/err"
rc=$?
t=$(printf '%.1f' "$(elapsed "$t0")")
[ $rc = 143 ] && grep -q "host=$IP1 exit_code=7 signal=-" "$W/err" && grep -q "host=$IP2 exit_code=143 signal=TERM" "$W/err" &&
  grep -q "^graceful node1$" "$W/out" &&
  ok "watches_stdin: node1 saw EOF and exited 7 itself, node2 ignored it and was TERMed 1 s later (run ${t} s)" ||
  { bad "watches_stdin (rc=$rc)"; cat "$W/out" "$W/err"; }
all_gone 4 || bad "processes left after watches_stdin stop"

# 5. A command that ignores TERM is KILLed by its watchdog after the grace period.
t0=$(now)
R --grace 1 "$IP1" "trap '' TERM; $S1 60" "$IP2" "sleep 0.3; exit 4" >/dev/null 2>"$W/err"
rc=$?
t=$(printf '%.1f' "$(elapsed "$t0")")
[ $rc = 4 ] && grep -q "host=$IP1 exit_code=137 signal=KILL" "$W/err" &&
  ok "TERM-ignoring command KILLed after the 1 s grace (run ${t} s)" || { bad "KILL escalation (rc=$rc)"; cat "$W/err"; }
all_gone 3 || bad "processes left after KILL escalation"

grep -v "$IP3" "$TESTBED_KNOWN_HOSTS" >"$W/kh_no3"

# 6. Environment (shell-quoted exports) and ssh_capture.
out=$(R --env "A=it's \$HOME \"q\" \`x\`" --env B=2 "$IP2" 'printf "%s|%s\n" "$A" "$B"' 2>/dev/null)
[ "$out" = "it's \$HOME \"q\" \`x\`|2" ] && ok "env exported verbatim through quoting" || bad "env: got [$out]"
out=$(R --capture "$IP3" 'hostname' 2>&1)
[ "$out" = node3 ] && ok "ssh_capture returns stdout" || bad "ssh_capture: [$out]"
out=$(R --capture "$IP3" 'echo no such file >&2; exit 5' 2>&1)
grep -q "exited with code 5: no such file; run it there by hand" <<<"$out" && ok "ssh_capture failure names code, stderr, remedy" ||
  bad "ssh_capture failure: [$out]"

# ssh_capture_all: every host checked at once; each failure reported, none stops the others.
out=$(R --capture --known_hosts "$W/kh_no3" "$IP1" 'echo one' "$IP2" 'echo two; echo broken >&2; exit 5' "$IP3" true)
rc=$?
[ $rc = 1 ] && grep -q "^capture: $IP1 ok$" <<<"$out" && grep -q "^one$" <<<"$out" &&
  grep -q "^capture: $IP2 FAILED: on $IP2: .* exited with code 5: broken" <<<"$out" &&
  grep -q "^capture: $IP3 FAILED: unknown host" <<<"$out" &&
  ok "ssh_capture_all: node1 ok, node2 exit 5 and node3 unknown host key, all reported" ||
  { bad "ssh_capture_all (rc=$rc)"; echo "$out"; }

# Keys from ssh-agent (tried before identity files; here the only file is missing).
if command -v ssh-agent >/dev/null; then
  eval "$(ssh-agent -s)" >/dev/null
  ssh-add -q "$TESTBED_KEY" 2>/dev/null
  out=$("$RUN" --key "$W/missing" --known_hosts "$TESTBED_KNOWN_HOSTS" "$IP1" 'echo agent-ok' 2>/dev/null)
  [ "$out" = agent-ok ] && ok "auth through ssh-agent" || bad "auth through ssh-agent: [$out]"
  kill "$SSH_AGENT_PID" 2>/dev/null
  unset SSH_AUTH_SOCK SSH_AGENT_PID
fi

# 7. Documented errors.
expect_error() {  # NAME PATTERN ssh_run_check-args...
  local name=$1 pattern=$2
  shift 2
  out=$("$RUN" --no-agent "$@" 2>&1)
  if [ $? = 255 ] && grep -q -- "$pattern" <<<"$out"; then ok "$name: $(echo "$out" | head -1 | cut -c1-150)..."
  else bad "$name"; echo "$out"; fi
}
n1key=$(grep "^node1," "$TESTBED_KNOWN_HOSTS" | cut -d' ' -f2-)
{ grep -v "^node2," "$TESTBED_KNOWN_HOSTS"; echo "$IP2 $n1key"; } >"$W/kh_swap"
ssh-keygen -q -t ed25519 -N '' -f "$W/stranger"
expect_error "unknown host key" "unknown host: $IP3 is not in $W/kh_no3.*ssh-keyscan -t ed25519 $IP3 >> $W/kh_no3" \
  --key "$TESTBED_KEY" --known_hosts "$W/kh_no3" "$IP3" true
expect_error "host key mismatch" "HOST KEY MISMATCH for $IP2.*ssh-keygen -R $IP2" \
  --key "$TESTBED_KEY" --known_hosts "$W/kh_swap" "$IP2" true
expect_error "wrong key" "authentication as root@$IP2:22 failed; tried: $W/stranger (rejected by the server); $W/none (No such file" \
  --key "$W/stranger" --key "$W/none" --known_hosts "$TESTBED_KNOWN_HOSTS" "$IP2" true
expect_error "RSA key vs OpenSSH 9" "PubkeyAcceptedAlgorithms +ssh-rsa" \
  --key "$TESTBED_KEY_RSA" --known_hosts "$TESTBED_KNOWN_HOSTS" "$IP2" true
expect_error "connection refused" "connection refused by $IP1:2222 ($IP1): is sshd running there" \
  --port 2222 --key "$TESTBED_KEY" --known_hosts "$TESTBED_KNOWN_HOSTS" "$IP1" true
expect_error "cannot resolve" "cannot resolve host 'no-such-host.invalid'" \
  --key "$TESTBED_KEY" --known_hosts "$TESTBED_KNOWN_HOSTS" no-such-host.invalid true
# a failed login on one host stops the hosts already running
t0=$(now)
out=$("$RUN" --no-agent --key "$TESTBED_KEY" --known_hosts "$W/kh_no3" "$IP1" "$S1 60" "$IP2" "$S2 60" "$IP3" "$S3 60" 2>&1)
t=$(printf '%.1f' "$(elapsed "$t0")")
# (node1/node2 are usually still logging in: then they are "not started"; else TERMed)
grep -q "^dscpp: host $IP3 failed: unknown host" <<<"$out" &&
  [ "$(echo "$out" | grep -cE "host=($IP1|$IP2) exit_code=(143 signal=TERM|255 signal=- error=not started: stopped after $IP3 failed)")" = 2 ] &&
  ok "a host-key failure on node3 stops node1/node2 (run ${t} s)" || { bad "login failure stop"; echo "$out"; }
all_gone 5 || bad "processes left after a login failure"

# 7b. ~/.ssh/config (HOME is a scratch directory): Host aliases with HostName, Port, User and an
# IdentityFile written with ~ and %r, through the launcher on node1 and through ssh_run_check.
# node2 also runs an sshd on port 2222 (stopped by the testbed's `down`); $SSH_CONNECTION and
# that sshd's log show which port a session came in on.
H7=$W/home7
mkdir -p "$H7/.ssh" "$H7/keys"
cp "$TESTBED_KEY" "$H7/keys/root_key"
{ cat "$TESTBED_KNOWN_HOSTS"; awk '{print "[node2]:2222", $1, $2}' "$TESTBED_DIR/node2/host_ed25519.pub"; } >"$H7/kh"
sed -e 's/^Port 22$/Port 2222/' -e "s|^PidFile .*|PidFile $W/sshd2222.pid|" "$TESTBED_DIR/node2/sshd_config" \
  >"$W/sshd2222_config"
"$T" exec node2 /usr/sbin/sshd -f "$W/sshd2222_config" -E "$W/sshd2222.log"
for k in $(seq 1 50); do timeout 1 bash -c "exec 3<>/dev/tcp/$IP2/2222" 2>/dev/null && break; sleep 0.1; done
cat >"$H7/.ssh/config" <<EOF
# written by launch_ssh.sh
Host a1
  HostName node1
Host a2
  HostName node2
  Port 2222
Host a3
  HostName node3
  User nobody-here
Host *
  User root
  IdentityFile ~/keys/%r_key
  UserKnownHostsFile ~/kh
  ServerAliveInterval 30
  ForwardAgent yes
EOF
user_line=$(grep -n "User nobody-here" "$H7/.ssh/config" | cut -d: -f1)
printf 'a1 slots=1\na2 slots=1\nroot@a3 slots=1\n' >"$W/hf7"
D7() { "$T" exec node1 env -u SSH_AUTH_SOCK HOME="$H7" "$DSCPP" "$@"; }
C7() { "$T" exec node1 env -u SSH_AUTH_SOCK HOME="$H7" "$RUN" "$@"; }
out=$(D7 --hostfile "$W/hf7" -- /bin/sh -c 'echo "cfg $(hostname) port ${SSH_CONNECTION##* }"' 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "cfg node1 port 22$" <<<"$out" && grep -q "cfg node2 port 2222$" <<<"$out" &&
  grep -q "^\[rank 2 root@a3\] cfg node3 port 22$" <<<"$out" && grep -q "Accepted publickey for root" "$W/sshd2222.log" &&
  ok "dscpp with ~/.ssh/config: a1..a3 reached node1..node3, a2 on its Port 2222, root@a3 over the config's User" ||
  { bad "dscpp through ~/.ssh/config (rc=$rc)"; echo "$out"; }
out=$(D7 --hostfile "$W/hf7" --include a2@root@a3 -- /bin/sh -c 'echo "inc $(hostname)"' 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "inc node2" <<<"$out" && grep -q "inc node3" <<<"$out" && ! grep -q "inc node1" <<<"$out" &&
  ok "--include a2@root@a3: user@host in -i; only node2 and node3 ran" || { bad "user@host in --include (rc=$rc)"; echo "$out"; }
p_cfg=$(C7 --capture a2 'echo ${SSH_CONNECTION##* }' 2>&1)
p_flag=$(C7 --capture --port 22 a2 'echo ${SSH_CONNECTION##* }' 2>&1)
[ "$p_cfg" = 2222 ] && [ "$p_flag" = 22 ] && ok "Port 2222 from the config; a command-line port (--ssh_port) overrides it" ||
  bad "config Port: got [$p_cfg] and, with --port 22, [$p_flag]"
out=$(C7 --capture a3 true 2>&1)
grep -q "authentication as nobody-here@node3:22 failed; tried: $H7/keys/nobody-here_key (No such file" <<<"$out" &&
  grep -q "The user nobody-here is from $H7/.ssh/config:$user_line (User)" <<<"$out" &&
  [ "$(C7 --capture --user root a3 hostname 2>&1)" = node3 ] &&
  ok "the config's User (and %r in IdentityFile) applies, named with file:line; --ssh_user overrides it" ||
  { bad "config User"; echo "$out"; }

# 7c. --ssh_identity: a key that ~/.ssh does not hold and no config names.
H7c=$W/home7c
mkdir -p "$H7c/.ssh"
Dc() {
  "$T" exec node1 env -u SSH_AUTH_SOCK HOME="$H7c" "$DSCPP" --hostfile "$TESTBED_HOSTFILE" --ssh_user root \
    --ssh_known_hosts "$TESTBED_KNOWN_HOSTS" "$@"
}
out=$(Dc -- /bin/sh -c 'echo "id $(hostname)"' 2>&1)
rc=$?
[ $rc != 0 ] && grep -q "no key could be offered: create one and install it there with ssh-keygen -t ed25519 && ssh-copy-id root@node1" <<<"$out" &&
  ok "no key anywhere: the error says so and names ssh-keygen + ssh-copy-id" || { bad "no-key error (rc=$rc)"; echo "$out"; }
out=$(Dc --ssh_identity "$W/none" --ssh_identity "$TESTBED_KEY" -- /bin/sh -c 'echo "id $(hostname)"' 2>&1)
rc=$?
[ $rc = 0 ] && for i in 1 2 3; do grep -q "id node$i" <<<"$out" || rc=99; done
[ $rc = 0 ] && ok "--ssh_identity (given twice, the first missing): every host logged in with a key ~/.ssh lacks" ||
  { bad "--ssh_identity (rc=$rc)"; echo "$out"; }

# 7d. Options dscpp cannot honour are refused by name with file:line: a Match block wherever it
# is; CertificateFile only for the host it applies to.
H7d=$W/home7d
mkdir -p "$H7d/.ssh"
printf 'Host *\n  User root\n  IdentityFile %s\n  UserKnownHostsFile %s\n\nMatch host node2\n  User other\n' \
  "$TESTBED_KEY" "$TESTBED_KNOWN_HOSTS" >"$H7d/.ssh/config"
out=$("$T" exec node1 env -u SSH_AUTH_SOCK HOME="$H7d" "$DSCPP" --hostfile "$TESTBED_HOSTFILE" -- true 2>&1)
rc=$?
[ $rc != 0 ] && grep -q "$H7d/.ssh/config:6: found a Match block (\"Match host node2\"); dscpp does not evaluate Match" <<<"$out" &&
  ok "a Match block is refused by name: $(grep -o "config:6: found a Match block[^;]*" <<<"$out")" ||
  { bad "Match refused (rc=$rc)"; echo "$out"; }
printf 'Host node3\n  CertificateFile ~/.ssh/id_ed25519-cert.pub\nHost *\n  User root\n  IdentityFile %s\n  UserKnownHostsFile %s\n' \
  "$TESTBED_KEY" "$TESTBED_KNOWN_HOSTS" >"$W/cfg_cert"
out=$("$T" exec node1 env -u SSH_AUTH_SOCK HOME="$H7d" "$RUN" --ssh_config "$W/cfg_cert" --capture node1 'echo one' node3 true 2>&1)
grep -q "^capture: node1 ok$" <<<"$out" && grep -q "^capture: node3 FAILED: the ssh config $W/cfg_cert sets options for host node3 that dscpp cannot honour" <<<"$out" &&
  grep -q "$W/cfg_cert:2: CertificateFile ~/.ssh/id_ed25519-cert.pub: libssh2 1.10 cannot log in with certificates" <<<"$out" &&
  ok "CertificateFile refused for node3 (file:line, why), node1 unaffected" || { bad "CertificateFile refused"; echo "$out"; }

# 7e. ProxyJump through node1 to node3, from this (root) namespace, where "node3" does not
# resolve: only the jump host knows that name. ssh_run_check reports its child processes at the
# end: the `ssh -W` (and a ProxyCommand that never answers) must be killed and reaped.
cat >"$W/cfg_jump" <<EOF
Host via3
  HostName node3
  ProxyJump root@$IP1
Host direct3
  HostName node3
Host stuck
  HostName node3
  ProxyCommand $S1 300
Host *
  User root
  IdentityFile $TESTBED_KEY
  IdentitiesOnly yes
  UserKnownHostsFile $TESTBED_KNOWN_HOSTS
EOF
out=$(env -u SSH_AUTH_SOCK "$RUN" --ssh_config "$W/cfg_jump" --report-children via3 'echo "$(hostname) via ${SSH_CONNECTION%% *}"' 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "^node3 via $IP1$" <<<"$out" && grep -q "^children: 0$" <<<"$out" &&
  ok "ProxyJump root@node1: node3 reached through node1; the ssh -W was reaped (children: 0)" ||
  { bad "ProxyJump (rc=$rc)"; echo "$out"; }
out=$(env -u SSH_AUTH_SOCK "$RUN" --ssh_config "$W/cfg_jump" direct3 true 2>&1)
grep -q "cannot resolve host 'node3' (the HostName of 'direct3' in $W/cfg_jump)" <<<"$out" &&
  ok "without the jump, node3 does not resolve here (so the jump was what reached it)" || { bad "direct3"; echo "$out"; }
printf 'via3 slots=2\n' >"$W/hf_jump"
out=$(env -u SSH_AUTH_SOCK "$DSCPP" --hostfile "$W/hf_jump" --ssh_config "$W/cfg_jump" -- \
  /bin/sh -c 'echo "rank on $(hostname) via ${SSH_CONNECTION%% *}"' 2>&1)
rc=$?
[ $rc = 0 ] && [ "$(grep -c "rank on node3 via $IP1$" <<<"$out")" = 2 ] && ok "dscpp: 2 ranks on node3 through ProxyJump" ||
  { bad "dscpp through ProxyJump (rc=$rc)"; echo "$out"; }
t0=$(now)
out=$(env -u SSH_AUTH_SOCK "$RUN" --ssh_config "$W/cfg_jump" --login-timeout 2 --report-children stuck true 2>&1)
t=$(printf '%.1f' "$(elapsed "$t0")")
grep -q "logging in to node3:22 through $W/cfg_jump:8 (ProxyCommand $S1 300) did not finish within 2 s" <<<"$out" &&
  grep -q "^children: 0$" <<<"$out" && all_gone 2 &&
  ok "a ProxyCommand that never answers: login timeout after 2 s (run ${t} s), the proxy killed and reaped" ||
  { bad "stuck ProxyCommand"; echo "$out"; }

# 7f. An RSA key the server rejects (libssh2 1.10 signs with SHA-1): the remedy is an ed25519 or
# ECDSA key, or ssh-rsa allowed on the server; a rejected ed25519 key gets authorized_keys.
printf 'Host *\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n' \
  "$TESTBED_KEY_RSA" "$TESTBED_KNOWN_HOSTS" >"$W/cfg_rsa"
out=$("$T" exec node1 env HOME="$W" "$DSCPP" --hostfile "$TESTBED_HOSTFILE" --ssh_config "$W/cfg_rsa" -- true 2>&1)
rc=$?
[ $rc != 0 ] && grep -q "every key the server rejected is RSA: use an ed25519 or ECDSA key (ssh-keygen -t ed25519, then ssh-copy-id), or allow ssh-rsa on the server with PubkeyAcceptedAlgorithms +ssh-rsa" <<<"$out" &&
  ! grep -q "authorized_keys" <<<"$out" && ok "RSA key rejected: the remedy names the ed25519/ECDSA fix, not authorized_keys" ||
  { bad "RSA remedy (rc=$rc)"; echo "$out"; }
out=$("$RUN" --no-agent --ssh_config none --key "$W/stranger" --known_hosts "$TESTBED_KNOWN_HOSTS" "$IP2" true 2>&1)
grep -q "Remedy: add your public key to ~root/.ssh/authorized_keys on $IP2" <<<"$out" && ! grep -q "ECDSA" <<<"$out" &&
  ok "ed25519 key rejected: the remedy is authorized_keys (or naming the right key)" || { bad "ed25519 remedy"; echo "$out"; }

# 8. Time to run `true` on 3 hosts: connect + auth + exec + close, vs OpenSSH in this run.
best() { sort -n | head -1; }
ours=$(for k in 1 2 3; do t0=$(now); R "$IP1" true "$IP2" true "$IP3" true 2>/dev/null; elapsed "$t0"; done | best)
par=$(for k in 1 2 3; do t0=$(now); for ip in $TESTBED_IPS; do $TESTBED_SSH "$ip" true & done; wait; elapsed "$t0"; done | best)
seq=$(for k in 1 2; do t0=$(now); for ip in $TESTBED_IPS; do $TESTBED_SSH "$ip" true; done; elapsed "$t0"; done | best)
printf 'timing - `true` on 3 hosts (connect+auth+exec+close), best of 3: dscpp/libssh2 %.2f s | OpenSSH ssh parallel %.2f s, sequential %.2f s\n' \
  "$ours" "$par" "$seq"

# 9. The launcher proper: `dscpp --hostfile H -- cmd`, run from node1 (node names resolve there).
if grep -q -- --hostfile <<<"$("$DSCPP" --help 2>&1)"; then
  H=$W/home && mkdir -p "$H/.ssh" && cp "$TESTBED_KEY" "$H/.ssh/id_ed25519" && cp "$TESTBED_KNOWN_HOSTS" "$H/.ssh/known_hosts"
  D() { "$T" exec node1 env HOME="$H" "$DSCPP" --hostfile "$TESTBED_HOSTFILE" "$@"; }
  out=$(D -- /bin/sh -c 'echo "hello from $(hostname)"' 2>&1)
  rc=$?
  [ $rc = 0 ] && for i in 1 2 3; do grep -q "hello from node$i" <<<"$out" || rc=99; done
  [ $rc = 0 ] && ok "dscpp --hostfile: every host ran the command" || { bad "dscpp --hostfile run (rc=$rc)"; echo "$out"; }
  t0=$(now)
  out=$(D -- /bin/sh -c "case \$(hostname) in node2) sleep 0.5; exit 4;; node1) exec $S1 60;; *) exec $S3 60;; esac" 2>&1)
  rc=$?
  t=$(printf '%.1f' "$(elapsed "$t0")")
  [ $rc = 4 ] && grep -qE "^dscpp: rank [23] on node2 exited with code 4; stopping the other hosts$" <<<"$out" &&
    ok "dscpp: node2's ranks exit 4 -> dscpp exits 4 naming the rank and node2 (${t} s)" ||
    { bad "dscpp failure propagation (rc=$rc)"; echo "$out"; }
  all_gone 8 && ok "dscpp: no remote process left (${gone_after} s)" || bad "dscpp: processes left"

  # Blame across hosts: rank 0 (node1) exits 3 first, as a rank does that saw a peer fail; rank 5
  # (node3), the cause, fails a second later. Over 3 runs the launcher names rank 5 each time.
  right=0
  for k in 1 2 3; do
    out=$(D -- /bin/sh -c "case \$RANK in 0) sleep 0.3; exit 3;; 5) sleep 1.3; exit 1;; *) exec $S2 60;; esac" 2>&1)
    rc=$?
    [ $rc = 1 ] && grep -q "^dscpp: rank 5 on node3 exited with code 1 (rank 0 had stopped because of a peer's failure)" \
      <<<"$out" && right=$((right + 1)) || echo "$out" | grep "^dscpp:"
  done
  [ $right = 3 ] && ok "blame across hosts: rank 5 on node3, which failed on its own, named and its code 1 returned in 3 of 3 runs" ||
    bad "blame across hosts: right in $right of 3 runs"
  all_gone 8 || bad "blame runs: processes left"

  # A rank killed by SIGKILL: 137, named with its host.
  out=$(D -- /bin/sh -c "if [ \$RANK = 3 ]; then sleep 0.5; kill -9 \$\$; fi; exec $S2 60" 2>&1)
  rc=$?
  [ $rc = 137 ] && grep -q "^dscpp: rank 3 on node2 killed by signal KILL; stopping the other hosts" <<<"$out" &&
    ok "dscpp: rank 3 killed by SIGKILL -> exit 137, rank and host named" || { bad "SIGKILL of a rank (rc=$rc)"; echo "$out"; }
  all_gone 8 || bad "SIGKILL run: processes left"

  # SIGTERM to the launcher (what a batch system sends): every host stopped, said, exit 143.
  "$T" exec node1 env HOME="$H" "$DSCPP" --hostfile "$TESTBED_HOSTFILE" -- "$S1" 60 >"$W/term.out" 2>&1 &
  dpid=$!
  t0=$(now)
  until [ "$(left_on 1)" -ge 2 ] && [ "$(left_on 3)" -ge 2 ]; do
    [ "$(echo "$(elapsed "$t0") > 15" | bc)" = 1 ] && break
    sleep 0.2
  done
  sleep 0.5
  pkill -TERM -f "^$DSCPP --hostfile $TESTBED_HOSTFILE -- $S1 60" 
  wait $dpid
  rc=$?
  [ $rc = 143 ] && grep -q "^dscpp: received SIGTERM; stopping all hosts" "$W/term.out" &&
    ok "SIGTERM to dscpp: 'received SIGTERM; stopping all hosts', exit 143" || { bad "SIGTERM to dscpp (rc=$rc)"; cat "$W/term.out"; }
  all_gone 8 && ok "SIGTERM to dscpp: no remote process left (${gone_after} s)" || bad "SIGTERM: processes left"
else
  echo "skipping dscpp checks: \`dscpp --help\` has no --hostfile yet"
fi

[ $fails = 0 ] && echo "PASS: launch_ssh" || echo "FAIL: launch_ssh ($fails failures)"
[ $fails = 0 ]
