#!/usr/bin/env bash
# System test of the ssh runner's pre-flight against 3 sshd "hosts" in network namespaces
# (tests/testbed/netns-hosts.sh): that it runs in the sessions that start the agents (one login
# per host), its cost per launch, and each problem it must report before any rank starts. The
# nodes share this machine's filesystem, but each sshd runs in a private mount namespace, so a
# file is made to differ on one host by mounting over it in that sshd's namespace (nsenter):
# what that host's sessions see, and no other.
#   launch_ssh_preflight.sh DSCPP SOURCE_ROOT [PLUGIN.so]
# With PLUGIN.so (run under dscpp-runtime) the cost is also measured for a plugin launch, where
# dscpp, dscpp-runtime and the plugin are all checked.
# The testbed scripts come from SOURCE_ROOT/tests/testbed, or from $DSCPP_TESTBED when set.
# Needs root, `ip netns`, nsenter and OpenSSH (scripts/setup.sh test); exits 77 (skip) otherwise.
set -uo pipefail

# absolute (meson passes paths relative to the build directory), symlinks kept
abs() { case $1 in /*) echo "$1" ;; ?*) echo "$PWD/$1" ;; esac; }
DSCPP=$(abs "$1")
SRC=$2
PLUGIN=$(abs "${3:-}")
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, sshd, mounts)"
ip netns list >/dev/null 2>&1 || skip "needs iproute2 with 'ip netns'"
command -v nsenter >/dev/null || skip "needs nsenter (util-linux)"
[ -x /usr/sbin/sshd ] && command -v ssh >/dev/null || skip "needs openssh-server and openssh-client"
T=${DSCPP_TESTBED:-$SRC/tests/testbed}/netns-hosts.sh
[ -x "$T" ] || { echo "FAIL: testbed script $T missing or not executable"; exit 1; }

# Our own testbed: name, subnet and state dir of this run, always taken down.
. "$(dirname "$0")/netns_testbed.sh"
testbed_up dsp 10.253 3

# Copies in the installed layout (dscpp-runtime next to dscpp): a rebuild of the build tree
# while this runs would otherwise show up as hosts seeing different builds.
mkdir -p "$W/bin" && cp "$DSCPP" "$W/bin/dscpp" || { echo "FAIL: cannot copy $DSCPP"; exit 1; }
DSCPP=$W/bin/dscpp
if [ -n "$PLUGIN" ]; then
  runtime=$(dirname "$1")/../runtime/dscpp-runtime
  [ -x "$runtime" ] || runtime=$(dirname "$1")/dscpp-runtime
  if [ -x "$runtime" ]; then
    cp "$runtime" "$W/bin/dscpp-runtime" && cp "$PLUGIN" "$W/bin/" && PLUGIN=$W/bin/$(basename "$PLUGIN")
  else
    echo "no dscpp-runtime next to $1 nor in its build tree: not measuring a plugin launch"
    PLUGIN=
  fi
fi

fails=0
ok() { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }

# dscpp runs on node1, where node names resolve; HOME holds the testbed's key and known_hosts.
H=$W/home && mkdir -p "$H/.ssh" && cp "$TESTBED_KEY" "$H/.ssh/id_ed25519" && cp "$TESTBED_KNOWN_HOSTS" "$H/.ssh/known_hosts"
D() { "$T" exec node1 env HOME="$H" "$DSCPP" --hostfile "$TESTBED_HOSTFILE" "$@"; }
# on_node I CMD...: CMD in node I's sshd mount namespace (what its ssh sessions see)
on_node() {
  local i=$1 pid
  shift
  pid=$(cat "$TESTBED_DIR/node$i/sshd.pid") || return 1
  nsenter -t "$pid" -m "$@"
}
# The problem lines of a pre-flight failure (those naming a host).
problems() { grep -E '^  [^ ]+: ' <<<"$1"; }

# 1. A clean launch passes the pre-flight and relays the program's stdout and stderr, but not
# what the check printed (its probe lines, the port line, the marker); what the pre-flight adds
# to a launch, best of 3.
out=$(D -- /bin/sh -c 'echo "up on $(hostname)"; echo "err on $(hostname)" >&2' 2>&1)
rc=$?
[ $rc = 0 ] && for i in 1 2 3; do grep -q "up on node$i" <<<"$out" && grep -q "err on node$i" <<<"$out" || rc=99; done
leak=$(grep -E "dscpp-check-done|PORT|^[0-9]+ [0-9a-f]{40}$" <<<"$out")
[ $rc = 0 ] && [ -z "$leak" ] && ok "pre-flight passes, every host runs the program, the check's output is not shown" ||
  { bad "clean launch (rc=$rc; check output shown: ${leak:-none})"; echo "$out"; }

# One ssh login per host, the check included: each session's login shell (bash reads ~/.bashrc
# when sshd runs it) appends its host's name to a log, in the nodes' mount namespaces only.
rc_file=$(getent passwd "$(id -un)" | cut -d: -f6)/.bashrc
if [ -e "$rc_file" ]; then
  printf 'echo "$(hostname)" >>%s/logins\n' "$W" >"$W/count.bashrc"
  counting=1
  for i in 1 2 3; do on_node $i mount --bind "$W/count.bashrc" "$rc_file" || counting=0; done
  : >"$W/logins"
  [ $counting = 1 ] && D -- true >/dev/null 2>&1 || counting=0
  for i in 1 2 3; do on_node $i umount "$rc_file" 2>/dev/null; done
  logins=$(sort "$W/logins" | uniq -c | awk '{printf "%s:%s ", $2, $1}')
  if [ $counting = 0 ]; then bad "could not count the logins of a launch"
  elif [ ! -s "$W/logins" ]; then echo "skip - login count: the login shell does not read $rc_file"
  elif [ "$logins" = "node1:1 node2:1 node3:1 " ]; then ok "a checked launch logs in once per host ($logins)"
  else bad "a checked launch should log in once per host, counted $logins"; fi
fi

# best_of3 ARGS...: the shortest of 3 launches in seconds; "fail" when one exits other than 0.
best_of3() {
  local t0 rc
  for _ in 1 2 3; do
    t0=$(now)
    D "$@" >/dev/null 2>"$W/timed.err"
    rc=$?
    [ "$rc" = 0 ] || { echo fail; cat "$W/timed.err" >&2; return; }
    elapsed "$t0"
  done | sort -n | head -1
}
measure() {  # measure LABEL ARGS...
  local label=$1 with without cost
  shift
  with=$(best_of3 "$@")
  without=$(best_of3 --no_ssh_check "$@")
  if [ "$with" = fail ] || [ "$without" = fail ]; then bad "timing launches of $label failed"; return; fi
  cost=$(echo "$with - $without" | bc)
  printf 'pre-flight on 3 hosts: %.3f s (%s; launch %.3f s with it, %.3f s with --no_ssh_check; best of 3)\n' \
    "$cost" "$label" "$with" "$without"
  # measured, not asserted: only a bound that a pre-flight hashing whole files per launch breaks
  [ "$(echo "$cost < 1.5" | bc)" = 1 ] && ok "below the 1.5 s sanity bound" ||
    bad "pre-flight of $label took $cost s"
}
measure_both() {  # measure_both NOTE
  measure "dscpp checked: -- true$1" -- true
  # Each rank starts dscpp-runtime, which prints its usage and exits 0, on every host in both
  # launches. Ranks that fail would not do: the first failure stops the hosts still logging in,
  # so a launch without the check, whose hosts start one by one, would skip the others' ranks.
  [ -z "$PLUGIN" ] || measure "dscpp, dscpp-runtime and $(basename "$PLUGIN") checked$1" -- "$PLUGIN" --help
}
measure_both ""
# Every ssh session runs the login shell, which on some machines sources a ~/.bashrc that costs
# more than the check (pyenv or conda init: 0.1 s of CPU per session). Measured again without
# it, in the nodes' mount namespaces only, for what the pre-flight itself costs.
if [ -s "$rc_file" ]; then
  masked=1
  for i in 1 2 3; do on_node $i mount --bind /dev/null "$rc_file" || masked=0; done
  [ $masked = 1 ] && measure_both "; $rc_file masked on the nodes"
  for i in 1 2 3; do on_node $i umount "$rc_file" 2>/dev/null; done
fi

# 2. A program file that differs on node2 and is missing on node3: both reported at once, each
# with its host; only the difference may be skipped with --no_ssh_check.
mkdir -p "$W/p"
printf '#!/bin/sh\necho "same on $(hostname)"\n' >"$W/p/prog.sh"
printf '#!/bin/sh\necho "diff on $(hostname)"\n' >"$W/other.sh"  # same size: told apart by content
chmod +x "$W/p/prog.sh" "$W/other.sh"
on_node 2 mount --bind "$W/other.sh" "$W/p/prog.sh" && on_node 3 mount -t tmpfs none "$W/p" ||
  bad "could not set up the differing files"
out=$(D -- "$W/p/prog.sh" 2>&1)
rc=$?
p=$(problems "$out")
if [ $rc = 1 ] && grep -q "pre-flight found 2 problems before starting any rank" <<<"$out" &&
   grep -q "^  node2: $W/p/prog.sh (the program) differs from this host's copy (sha256 [0-9a-f]\{12\}\.\.\. here, sha256 [0-9a-f]\{12\}\.\.\. there).*--no_ssh_check skips this check if the difference is intended" <<<"$p" &&
   grep -q "^  node3: $W/p/prog.sh (the program) does not exist there; every host needs it at the same path" <<<"$p" &&
   ! grep "^  node3" <<<"$p" | grep -q -- --no_ssh_check && ! grep -q "^  node1" <<<"$p" && ! grep -q "same on" <<<"$out"; then
  ok "program differing on node2 and missing on node3: both reported, no rank started"
  echo "$p" | sed 's/^/       /'
else bad "differing program (rc=$rc)"; echo "$out"; fi
# What the check guards against: skipped, node2 runs its own copy.
on_node 3 umount "$W/p" || bad "could not unmount on node3"
out=$(D --no_ssh_check -- "$W/p/prog.sh" 2>&1)
grep -q "diff on node2" <<<"$out" && grep -q "same on node3" <<<"$out" &&
  ok "with --no_ssh_check the launch goes ahead and node2 runs its different copy" || { bad "--no_ssh_check run"; echo "$out"; }
on_node 2 umount "$W/p/prog.sh" || bad "could not unmount on node2"

# 3. Another dscpp build on node3 (the same path holds another ELF file there).
cp "$(type -P true)" "$W/other-elf"
on_node 3 mount --bind "$W/other-elf" "$DSCPP" || bad "could not replace dscpp on node3"
out=$(D -- true 2>&1)
rc=$?
p=$(problems "$out")
[ $rc = 1 ] && grep -q "^  node3: $DSCPP is a different dscpp build than this host's ([0-9]* bytes there, [0-9]* here): install the same build on every host" <<<"$p" &&
  [ "$(wc -l <<<"$p")" = 1 ] && ok "a different dscpp on node3 is named: $(cut -c3-110 <<<"$p")..." || { bad "different dscpp (rc=$rc)"; echo "$out"; }
on_node 3 umount "$DSCPP" || bad "could not unmount dscpp on node3"

# 4. Rank 0's port taken on node1 (sshd's own port 22): reported, and skipping is not offered.
out=$(D --master_port 22 -- true 2>&1)
rc=$?
[ $rc = 1 ] && grep -q "^  node1: port 22 (rank 0's rendezvous) is already in use there: pass --master_port with a free port" <<<"$out" &&
  ! grep -q -- --no_ssh_check <<<"$out" && ok "taken master port reported without suggesting --no_ssh_check" ||
  { bad "taken port (rc=$rc)"; echo "$out"; }

# 5. A host that cannot be reached: named, the others still checked, skipping not offered.
printf 'node1 slots=1\nnode2 slots=1\nno-such-node.invalid slots=1\n' >"$W/hf_bad"
out=$("$T" exec node1 env HOME="$H" "$DSCPP" --hostfile "$W/hf_bad" -- true 2>&1)
rc=$?
p=$(problems "$out")
[ $rc = 1 ] && grep -q "^  no-such-node.invalid: cannot resolve host 'no-such-node.invalid'" <<<"$p" &&
  [ "$(wc -l <<<"$p")" = 1 ] && ! grep -q -- --no_ssh_check <<<"$out" &&
  ok "unreachable host reported alone, without suggesting --no_ssh_check" || { bad "unreachable host (rc=$rc)"; echo "$out"; }

# 6. dscpp reached through a symlink that points elsewhere on other hosts (a shared filesystem
# mounted at different places): the hosts are given the path as typed, not as resolved here.
# $W/s/link -> $W/A here and on node1; on node2 and node3, $W/s/link -> $W/B and $W/A is absent.
mkdir -p "$W/A" "$W/B" "$W/s" && cp "$DSCPP" "$W/A/dscpp" && cp "$DSCPP" "$W/B/dscpp" && ln -s "$W/A" "$W/s/link"
for i in 2 3; do
  on_node $i sh -c 'mount -t tmpfs none "$1/s" && ln -s "$1/B" "$1/s/link" && mount -t tmpfs none "$1/A"' sh "$W" ||
    bad "could not set up node$i's symlink"
done
SECRET_READ="IFS= read -r DSCPP_JOB_SECRET || exit 0; export DSCPP_JOB_SECRET; "
# --dry_run shows each host's whole command: the job's secret read from the channel's stdin,
# the check, the wait for `go`, then the agent.
out=$("$T" exec node1 env HOME="$H" "$W/s/link/dscpp" --hostfile "$TESTBED_HOSTFILE" --dry_run -- true 2>&1)
grep -q "^command on node2: $SECRET_READ(f=$W/s/link/dscpp; .*); echo dscpp-check-done; .*read -r go .* || exit 0; cd .* && exec $W/s/link/dscpp node-agent" <<<"$out" &&
  ok "the check and the agent command use dscpp's path as typed ($W/s/link/dscpp)" || { bad "agent path"; echo "$out"; }
out=$("$T" exec node1 env HOME="$H" "$W/s/link/dscpp" --hostfile "$TESTBED_HOSTFILE" --dry_run --no_ssh_check -- true 2>&1)
grep -q "^command on node2: ${SECRET_READ}cd .* && exec $W/s/link/dscpp node-agent" <<<"$out" &&
  ok "with --no_ssh_check the command is the agent alone" || { bad "--dry_run --no_ssh_check"; echo "$out"; }
out=$("$T" exec node1 env HOME="$H" "$W/s/link/dscpp" --hostfile "$TESTBED_HOSTFILE" -- /bin/sh -c 'echo "up on $(hostname)"' 2>&1)
rc=$?
[ $rc = 0 ] && for i in 1 2 3; do grep -q "up on node$i" <<<"$out" || rc=99; done
[ $rc = 0 ] && ok "launch through the symlink passes the pre-flight and runs on every host" || { bad "symlinked dscpp (rc=$rc)"; echo "$out"; }

[ $fails = 0 ] && echo "PASS: launch_ssh_preflight" || echo "FAIL: launch_ssh_preflight ($fails failures)"
[ $fails = 0 ]
