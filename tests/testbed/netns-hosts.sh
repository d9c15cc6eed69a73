#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2016  # "a && b || fail" is meant; sh -c bodies are single-quoted on purpose
# netns-hosts.sh — a pretend cluster of N machines on this one, for the launcher's SSH tests.
#
# Every "machine" node<i> is a network namespace with the address NET.<i>/24, its own
# hostname and /etc/hosts, and its own sshd that lets root in with the testbed's keys only.
# The namespaces are wired to a bridge that lives in a namespace of its own (so the host's
# firewall never sees the traffic); one more veth pair puts NET.254 in the root namespace,
# so tests running outside the nodes can reach every sshd by IP.
#
#   netns-hosts.sh up [N]           build N nodes (1..200, default 2); a working testbed
#                                   with the same N is kept as it is
#   netns-hosts.sh down             kill every process inside our namespaces, delete the
#                                   namespaces, links and the state directory
#   netns-hosts.sh status           one line per node; exit status 0 iff every sshd answers
#   netns-hosts.sh env              shell exports for: eval "$(netns-hosts.sh env)"
#   netns-hosts.sh exec node<i> CMD [ARGS...]
#                                   run CMD as if logged in on node<i> (its network, its
#                                   hostname, its /etc/hosts): node names resolve there
#
# Inputs (environment):
#   TESTBED_NAME   prefix of namespaces and links, at most 12 characters (default dstb);
#                  testbeds with different names and subnets can run side by side
#   TESTBED_NET    first three octets of an unused /24 (default 10.250.7); "up" refuses a
#                  subnet this machine already has an address or route in ("already in use")
#   TESTBED_DIR    state directory (default /tmp/$TESTBED_NAME)
#   TESTBED_SLOTS  slots per node written to the hostfile (default 2)
#   TESTBED_ALLOW_SSH_RSA=1  let sshd accept SHA-1 "ssh-rsa" signatures (OpenSSH 9 refuses
#                  them by default, which the RSA-key error test relies on)
#
# "env" exports TESTBED_NAME, TESTBED_NET, TESTBED_DIR, TESTBED_HOSTS (node names),
# TESTBED_IPS (their addresses, same order), TESTBED_SSH ("ssh -F <dir>/ssh_config"),
# TESTBED_SSH_CONFIG, TESTBED_KEY (ed25519, OpenSSH format), TESTBED_KEY_RSA (RSA in PEM
# format, for libssh2), TESTBED_KNOWN_HOSTS ("node<i>,<ip> <host key>" lines) and
# TESTBED_HOSTFILE ("node<i> slots=<n>" lines). The state directory also holds hosts
# ("<ip> node<i>" lines) and node<i>/ with that node's sshd_config, host key, pid and log.
#
# Needs root, iproute2, util-linux (nsenter, unshare, mount) and OpenSSH server + client;
# no systemd, no network. Nodes see this machine's /sys and /proc (there is no PID
# namespace), so `exec node1 pgrep` finds processes of every node.
set -euo pipefail

tb_name=${TESTBED_NAME:-dstb}
tb_net=${TESTBED_NET:-10.250.7}
tb_dir=${TESTBED_DIR:-/tmp/$tb_name}
tb_slots=${TESTBED_SLOTS:-2}
switch_ns="$tb_name-sw"   # holds bridge br0 and one port per node plus the uplink
gw_if="$tb_name-gw"       # root-namespace end of the uplink, address NET.254
sshd_bin=/usr/sbin/sshd

fail() { printf 'netns-hosts.sh: %s\n' "$*" >&2; exit 1; }
note() { printf 'netns-hosts.sh: %s\n' "$*" >&2; }

[ ${#tb_name} -ge 1 ] && [ ${#tb_name} -le 12 ] || fail "TESTBED_NAME must be 1 to 12 characters"
[[ $tb_name =~ ^[A-Za-z0-9_]+$ ]] || fail "TESTBED_NAME may hold only letters, digits and _"
[[ $tb_net =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || fail "TESTBED_NET must be three octets, like 10.250.7"
[[ $tb_slots =~ ^[0-9]+$ ]] || fail "TESTBED_SLOTS must be a number"

node_ns() { printf '%s-n%s' "$tb_name" "$1"; }
node_ip() { printf '%s.%s' "$tb_net" "$1"; }
node_dir() { printf '%s/node%s' "$tb_dir" "$1"; }
ns_present() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$1"; }
link_present() { ip link show dev "$1" >/dev/null 2>&1; }
node_count() { cat "$tb_dir/count" 2>/dev/null || echo 0; }

# Every host namespace of this testbed: the recorded ones and any leftover of a broken run.
our_namespaces() {
  local n i
  n=$(node_count)
  {
    for ((i = 1; i <= n; i++)); do node_ns "$i"; echo; done
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$tb_name-n[0-9]+\$" || true
  } | sort -u
}

# Prints the pid of node i's sshd when its pid file names a live sshd using our config.
sshd_pid() {
  local pid cmd
  pid=$(cat "$(node_dir "$1")/sshd.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmd == *"$(node_dir "$1")/sshd_config"* ]] || return 1
  echo "$pid"
}

# True when something at NET.i:22 greets like an SSH server (checked from the root namespace).
ssh_greets() {
  local banner
  banner=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/22" && head -c 8 <&3' greet "$(node_ip "$1")" 2>/dev/null) || true
  [[ $banner == SSH-2.0-* ]]
}

# Runs "$@" inside node i: its network namespace, plus a private mount namespace in which its
# hosts file covers /etc/hosts, plus a UTS namespace carrying its hostname.
in_node() {
  local i=$1
  shift
  exec nsenter --net="/run/netns/$(node_ns "$i")" \
    unshare --mount --uts --propagation private \
    /bin/sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" || exit 125; shift 2; exec "$@"' \
    node-shell "$tb_dir/etc_hosts" "node$i" "$@"
}

works_with() { # works_with N: the testbed is up with exactly N nodes that all answer
  local n=$1 i
  [ "$(node_count)" = "$n" ] && link_present "$gw_if" || return 1
  for ((i = 1; i <= n; i++)); do
    ns_present "$(node_ns "$i")" && sshd_pid "$i" >/dev/null && ssh_greets "$i" || return 1
  done
}

# Signals every process living in one of the given namespaces, then waits up to ~2 s for
# them to go.
signal_namespaces() {
  local sig=$1 ns pid waited=0 busy
  shift
  for ns in "$@"; do
    ns_present "$ns" || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -s "$sig" "$pid" 2>/dev/null || true; done
  done
  while ((waited < 20)); do
    busy=0
    for ns in "$@"; do
      ns_present "$ns" && [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && busy=1
    done
    ((busy == 0)) && return 0
    sleep 0.1
    waited=$((waited + 1))
  done
  return 1
}

take_down() {
  local namespaces ns i pid waited
  mapfile -t namespaces < <(our_namespaces)
  for ns in "${namespaces[@]}"; do
    i=${ns##*-n}
    if pid=$(sshd_pid "$i"); then kill "$pid" 2>/dev/null || true; fi
  done
  # Whatever is still inside a node was started through it (ssh sessions, ranks, exec).
  if ((${#namespaces[@]})); then
    signal_namespaces TERM "${namespaces[@]}" || signal_namespaces KILL "${namespaces[@]}" ||
      note "processes still inside ${namespaces[*]}"
  fi
  for ns in "${namespaces[@]}"; do
    if ns_present "$ns"; then ip netns delete "$ns"; fi
  done
  if ns_present "$switch_ns"; then ip netns delete "$switch_ns"; fi
  if link_present "$gw_if"; then ip link delete "$gw_if" 2>/dev/null || true; fi
  # the kernel removes veth ends of a deleted namespace a moment later
  waited=0
  while link_present "$gw_if" && ((waited < 50)); do sleep 0.1; waited=$((waited + 1)); done
  # /run/sshd is sshd's privilege-separation directory; remove it only if "up" made it and
  # no live sshd (zombies aside) is left on the machine to need it
  if [ -f "$tb_dir/made_run_sshd" ] && ! pgrep -x -r D,R,S,T,t,I sshd >/dev/null; then
    rmdir /run/sshd 2>/dev/null || true
  fi
  rm -rf "$tb_dir"
}

subnet_taken() {
  local prefix="^${tb_net//./\\.}\\."
  ip -4 -o addr show | awk '{print $4}' | grep -q "$prefix" && return 0
  ip -4 route show table all 2>/dev/null | awk '{print ($1 == "local" || $1 == "broadcast") ? $2 : $1}' |
    grep -q "$prefix"
}

write_sshd_config() { # write_sshd_config I
  local d
  d=$(node_dir "$1")
  cat >"$d/sshd_config" <<EOF
# sshd of testbed $tb_name, node$1 ($(node_ip "$1")); written by netns-hosts.sh
ListenAddress 0.0.0.0
Port 22
HostKey $d/host_ed25519
PidFile $d/sshd.pid
AuthorizedKeysFile $tb_dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxSessions 64
MaxStartups 128:30:256
EOF
  if [ "${TESTBED_ALLOW_SSH_RSA:-0}" = 1 ]; then
    echo "PubkeyAcceptedAlgorithms +ssh-rsa" >>"$d/sshd_config"
  fi
}

build() { # build N
  local n=$1 i ns ip d
  mkdir -p "$tb_dir"
  chmod 700 "$tb_dir"
  echo "$n" >"$tb_dir/count"
  if [ ! -d /run/sshd ]; then
    mkdir -p /run/sshd
    touch "$tb_dir/made_run_sshd"
  fi
  chmod 755 /run/sshd

  # client keys: ed25519 in OpenSSH's own format, RSA in PEM (what libssh2 reads best)
  ssh-keygen -q -t ed25519 -N '' -C "root@testbed-$tb_name" -f "$tb_dir/id_ed25519"
  ssh-keygen -q -t rsa -b 2048 -m PEM -N '' -C "root@testbed-$tb_name-rsa" -f "$tb_dir/id_rsa_pem"
  cat "$tb_dir/id_ed25519.pub" "$tb_dir/id_rsa_pem.pub" >"$tb_dir/authorized_keys"
  chmod 600 "$tb_dir/authorized_keys"

  # the /etc/hosts every node sees
  {
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    printf '%s\t%s\n' "$(node_ip 254)" "$tb_name-gw"
    for ((i = 1; i <= n; i++)); do printf '%s\tnode%s\n' "$(node_ip "$i")" "$i"; done
  } >"$tb_dir/etc_hosts"
  chmod 644 "$tb_dir/etc_hosts"

  # the switch, and the uplink that gives the root namespace NET.254
  ip netns add "$switch_ns"
  ip -n "$switch_ns" link set lo up
  ip -n "$switch_ns" link add br0 type bridge
  ip -n "$switch_ns" link set br0 up
  ip link add "$gw_if" type veth peer name uplink netns "$switch_ns"
  ip -n "$switch_ns" link set uplink master br0 up
  ip addr add "$(node_ip 254)/24" dev "$gw_if"
  ip link set "$gw_if" up

  : >"$tb_dir/hosts"
  : >"$tb_dir/hostfile"
  : >"$tb_dir/known_hosts"
  : >"$tb_dir/ssh_config"
  for ((i = 1; i <= n; i++)); do
    ns=$(node_ns "$i") ip=$(node_ip "$i") d=$(node_dir "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add eth0 type veth peer name "port$i" netns "$switch_ns"
    ip -n "$switch_ns" link set "port$i" master br0 up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up

    mkdir -p "$d"
    ssh-keygen -q -t ed25519 -N '' -C "node$i" -f "$d/host_ed25519"
    write_sshd_config "$i"
    # sshd forks into the background; its sessions inherit the node's namespaces
    (in_node "$i" "$sshd_bin" -f "$d/sshd_config" -E "$d/sshd.log")

    printf '%s node%s\n' "$ip" "$i" >>"$tb_dir/hosts"
    printf 'node%s slots=%s\n' "$i" "$tb_slots" >>"$tb_dir/hostfile"
    printf 'node%s,%s %s\n' "$i" "$ip" "$(awk '{print $1, $2}' "$d/host_ed25519.pub")" >>"$tb_dir/known_hosts"
    printf 'Host node%s %s\n    HostName %s\n' "$i" "$ip" "$ip" >>"$tb_dir/ssh_config"
  done
  cat >>"$tb_dir/ssh_config" <<EOF
Host *
    User root
    IdentityFile $tb_dir/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $tb_dir/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 5
    LogLevel ERROR
EOF

  local tries
  for ((i = 1; i <= n; i++)); do
    tries=0
    until ssh_greets "$i"; do
      tries=$((tries + 1))
      if ((tries > 50)); then
        note "sshd of node$i does not answer on $(node_ip "$i"):22; its log:"
        cat "$(node_dir "$i")/sshd.log" >&2 2>/dev/null || true
        return 1
      fi
      sleep 0.1
    done
  done
}

bring_up() {
  local n=$1
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || fail "N must be 1 to 200"
  if works_with "$n"; then
    echo "testbed $tb_name is already up with $n nodes"
    return 0
  fi
  take_down
  if subnet_taken; then
    fail "subnet $tb_net.0/24 is already in use on this machine; pick another TESTBED_NET"
  fi
  local tool
  for tool in "$sshd_bin" ssh-keygen nsenter unshare ip timeout; do
    command -v "$tool" >/dev/null || fail "$tool not found (needs openssh-server, openssh-client, util-linux, iproute2)"
  done
  # a failure half way leaves nothing behind
  trap 'note "up failed; removing what it built"; take_down >/dev/null 2>&1 || true' EXIT
  build "$n"
  trap - EXIT
  echo "testbed $tb_name up: node1..node$n at $tb_net.1..$tb_net.$n, state in $tb_dir"
}

print_env() {
  local n i names="" ips=""
  n=$(node_count)
  ((n > 0)) || fail "testbed $tb_name is not up"
  for ((i = 1; i <= n; i++)); do
    names+="${names:+ }node$i"
    ips+="${ips:+ }$(node_ip "$i")"
  done
  local var
  for var in \
    "TESTBED_NAME=$tb_name" "TESTBED_NET=$tb_net" "TESTBED_DIR=$tb_dir" \
    "TESTBED_HOSTS=$names" "TESTBED_IPS=$ips" \
    "TESTBED_SSH=ssh -F $tb_dir/ssh_config" "TESTBED_SSH_CONFIG=$tb_dir/ssh_config" \
    "TESTBED_KEY=$tb_dir/id_ed25519" "TESTBED_KEY_RSA=$tb_dir/id_rsa_pem" \
    "TESTBED_KNOWN_HOSTS=$tb_dir/known_hosts" "TESTBED_HOSTFILE=$tb_dir/hostfile"; do
    printf 'export %s=%q\n' "${var%%=*}" "${var#*=}"
  done
}

show_status() {
  local n i pid bad=0
  n=$(node_count)
  if ((n == 0)); then
    echo "testbed $tb_name is down"
    return 1
  fi
  for ((i = 1; i <= n; i++)); do
    if pid=$(sshd_pid "$i") && ssh_greets "$i"; then
      echo "node$i $(node_ip "$i") up (sshd $pid)"
    else
      echo "node$i $(node_ip "$i") NOT answering"
      bad=1
    fi
  done
  return $bad
}

run_on() {
  local node=${1:-} i
  [ -n "$node" ] && [ $# -ge 2 ] || fail "usage: netns-hosts.sh exec node<i> CMD [ARGS...]"
  shift
  [ "$1" = -- ] && shift
  i=${node#node}
  [[ $i =~ ^[0-9]+$ ]] && ((i >= 1 && i <= $(node_count))) && ns_present "$(node_ns "$i")" ||
    fail "no node $node in testbed $tb_name"
  in_node "$i" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up | down | status | env | exec) [ "$(id -u)" = 0 ] || fail "must run as root" ;;
esac
case "$cmd" in
  up) bring_up "${1:-2}" ;;
  down) take_down && echo "testbed $tb_name is down" ;;
  status) show_status ;;
  env) print_env ;;
  exec) run_on "$@" ;;
  *)
    sed -n '2,/^set -euo pipefail$/{/^set /d;/^# shellcheck/d;s/^# \{0,1\}//;p}' "$0"
    exit 2
    ;;
esac
