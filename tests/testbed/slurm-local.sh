#!/usr/bin/env bash
# shellcheck disable=SC2015  # "check && check || fail" is meant
# slurm-local.sh — a disposable SLURM cluster on this machine, for the launcher's SLURM tests.
#
# Starts a private munged (own key and socket), one slurmctld and N slurmd, all as root and
# without systemd, with every file under one state directory. The nodes are node1..nodeN;
# each slurmd listens on 127.0.0.1 on a port of its own, so all of them share this machine's
# hostname and only SLURMD_NODENAME tells them apart. Accounting is off (no slurmdbd):
# look at a finished job with `scontrol show job`, not sacct.
#
#   slurm-local.sh up [N]     start N nodes (1..32, default 2) and wait until all are idle;
#                             a running cluster with N idle nodes is kept as it is
#   slurm-local.sh down       cancel the jobs, stop this cluster's daemons and any process
#                             still carrying its SLURM_CONF (job steps, tasks), by PID;
#                             remove the state directory
#   slurm-local.sh status     sinfo of the cluster; exit status 0 iff every node is idle
#   slurm-local.sh env        prints "export SLURM_CONF=...": after eval "$(slurm-local.sh env)"
#                             sbatch, srun, squeue, scontrol and scancel use this cluster
#
# Inputs (environment):
#   SLURM_LOCAL_DIR   state directory (default /tmp/dsslurm)
#   SLURM_LOCAL_PORT  slurmctld's port (default 16817); node i's slurmd uses PORT+i
#   SLURM_LOCAL_CPUS  CPUs each node offers (default 2)
# Two clusters can run side by side with different directories and ports.
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge packages (bookworm:
# Slurm 22.05, MUNGE 0.5.15). Job steps run with proctrack/linuxproc and task/none, so no
# cgroup setup is needed.
set -euo pipefail

sl_dir=${SLURM_LOCAL_DIR:-/tmp/dsslurm}
sl_port=${SLURM_LOCAL_PORT:-16817}
sl_cpus=${SLURM_LOCAL_CPUS:-2}
conf="$sl_dir/slurm.conf"

fail() { printf 'slurm-local.sh: %s\n' "$*" >&2; exit 1; }

[[ $sl_dir == /* ]] || fail "SLURM_LOCAL_DIR must be an absolute path"
[[ $sl_port =~ ^[0-9]+$ ]] && ((sl_port > 1024 && sl_port < 65000)) || fail "SLURM_LOCAL_PORT must be 1025..64999"
[[ $sl_cpus =~ ^[1-9][0-9]*$ ]] || fail "SLURM_LOCAL_CPUS must be a positive number"

node_count() { cat "$sl_dir/count" 2>/dev/null || echo 0; }

# Prints the pid recorded in pid file $1 if that process is alive and was started with a
# path inside our state directory on its command line (so a reused pid is never taken).
daemon_pid() {
  local pid cmd
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmd == *"$sl_dir/"* ]] || return 1
  echo "$pid"
}

alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# Sends TERM to the given pids, waits up to 5 s, then KILLs what is left.
stop_pids() {
  local pid left t=0
  (($#)) || return 0
  kill "$@" 2>/dev/null || true
  while ((t < 50)); do
    left=()
    for pid in "$@"; do alive "$pid" && left+=("$pid"); done
    ((${#left[@]})) || return 0
    sleep 0.1
    t=$((t + 1))
  done
  kill -9 "${left[@]}" 2>/dev/null || true
}

# Processes started for this cluster: the daemons were started with SLURM_CONF=$conf in
# their environment, slurmstepd inherits it from slurmd, and jobs get it from whoever
# submitted them. This script and its callers (which may have eval'ed "env") are skipped.
cluster_pids() {
  local self=$BASHPID skip=" " p pid
  p=$$
  while [[ $p =~ ^[0-9]+$ ]] && ((p > 1)); do
    skip+="$p "
    p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null) || break
  done
  skip+="$self "
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $skip == *" $pid "* ]] && continue
    if tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$conf"; then echo "$pid"; fi
  done
}

idle_nodes() {
  SLURM_CONF=$conf timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | wc -l
}

running_with() { # running_with N
  [ "$(node_count)" = "$1" ] || return 1
  daemon_pid "$sl_dir/munge/munged.pid" >/dev/null || return 1
  daemon_pid "$sl_dir/run/slurmctld.pid" >/dev/null || return 1
  [ "$(idle_nodes)" = "$1" ]
}

take_down() {
  local f pid t pids=()
  [ -d "$sl_dir" ] || return 0
  if daemon_pid "$sl_dir/run/slurmctld.pid" >/dev/null; then
    local jobs
    jobs=$(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null || true)
    # shellcheck disable=SC2086  # one job id a word
    [ -z "$jobs" ] || SLURM_CONF=$conf timeout 10 scancel --quiet $jobs 2>/dev/null || true
    for ((t = 0; t < 50; t++)); do
      [ -z "$(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for f in "$sl_dir"/run/slurmd-*.pid; do
    [ -e "$f" ] || continue
    if pid=$(daemon_pid "$f"); then pids+=("$pid"); fi
  done
  stop_pids "${pids[@]}"
  mapfile -t pids < <(cluster_pids)
  stop_pids "${pids[@]}"
  if pid=$(daemon_pid "$sl_dir/run/slurmctld.pid"); then stop_pids "$pid"; fi
  if pid=$(daemon_pid "$sl_dir/munge/munged.pid"); then stop_pids "$pid"; fi
  rm -rf "$sl_dir"
}

port_taken() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

write_conf() { # write_conf N
  local n=$1 i
  cat >"$conf" <<EOF
# Cluster of slurm-local.sh (state in $sl_dir)
ClusterName=dscpplocal
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$sl_port
SlurmdPort=$((sl_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sl_dir/munge/munge.socket.2
StateSaveLocation=$sl_dir/ctld
SlurmdSpoolDir=$sl_dir/spool/%n
SlurmctldPidFile=$sl_dir/run/slurmctld.pid
SlurmdPidFile=$sl_dir/run/slurmd-%n.pid
SlurmctldLogFile=$sl_dir/log/slurmctld.log
SlurmdLogFile=$sl_dir/log/slurmd-%n.log
# no cgroups, no accounting, no mail
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MailProg=/bin/true
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=2
MinJobAge=300
InactiveLimit=0
EOF
  for ((i = 1; i <= n; i++)); do
    echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((sl_port + i)) CPUs=$sl_cpus State=UNKNOWN" >>"$conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$conf"
}

bring_up() {
  local n=$1 i t tool
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 32)) || fail "N must be 1 to 32"
  if running_with "$n"; then
    echo "slurm-local: already up with $n idle nodes (SLURM_CONF=$conf)"
    return 0
  fi
  take_down
  for tool in munged slurmctld slurmd sinfo scancel squeue ss; do
    command -v "$tool" >/dev/null || fail "$tool not found (apt-get install slurmctld slurmd slurm-client munge iproute2)"
  done
  for ((i = 0; i <= n; i++)); do
    port_taken $((sl_port + i)) && fail "port $((sl_port + i)) is in use; set SLURM_LOCAL_PORT"
  done
  # a failure half way leaves nothing behind but its logs, printed first
  trap 'echo "slurm-local.sh: up failed; last log lines:" >&2
    tail -n 20 "$sl_dir"/log/*.log "$sl_dir"/munge/munged.log >&2 2>/dev/null || true
    take_down >/dev/null 2>&1 || true' EXIT

  mkdir -p "$sl_dir"/{munge,ctld,run,log}
  for ((i = 1; i <= n; i++)); do mkdir -p "$sl_dir/spool/node$i"; done
  chmod 755 "$sl_dir" "$sl_dir/munge"   # munged refuses a socket directory others may write to
  echo "$n" >"$sl_dir/count"

  head -c 1024 /dev/urandom >"$sl_dir/munge/munge.key"
  chmod 400 "$sl_dir/munge/munge.key"
  munged --key-file="$sl_dir/munge/munge.key" --socket="$sl_dir/munge/munge.socket.2" \
    --pid-file="$sl_dir/munge/munged.pid" --log-file="$sl_dir/munge/munged.log" \
    --seed-file="$sl_dir/munge/munged.seed"

  write_conf "$n"
  # every daemon (and so every slurmstepd) carries SLURM_CONF: "down" finds them by it
  export SLURM_CONF=$conf
  slurmctld -i -f "$conf"
  for ((i = 1; i <= n; i++)); do slurmd -N "node$i" -f "$conf"; done

  for ((t = 0; t < 300; t++)); do
    [ "$(idle_nodes)" = "$n" ] && break
    sleep 0.1
  done
  if [ "$(idle_nodes)" != "$n" ]; then
    sinfo -N >&2 || true
    fail "the nodes are not idle after 30 s"
  fi
  trap - EXIT
  echo "slurm-local: up with $n nodes (SLURM_CONF=$conf)"
}

show_status() {
  local n
  n=$(node_count)
  if ((n == 0)) || [ ! -f "$conf" ]; then
    echo "slurm-local: down"
    return 1
  fi
  SLURM_CONF=$conf timeout 10 sinfo -N || return 1
  running_with "$n"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up | down | status) [ "$(id -u)" = 0 ] || fail "must run as root" ;;
esac
case "$cmd" in
  up) bring_up "${1:-2}" ;;
  down) take_down && echo "slurm-local: down" ;;
  status) show_status ;;
  env)
    [ -f "$conf" ] || fail "no cluster in $sl_dir (run: slurm-local.sh up)"
    printf 'export SLURM_CONF=%q\n' "$conf"
    ;;
  *)
    sed -n '2,/^set -euo pipefail$/{/^set /d;/^# shellcheck/d;s/^# \{0,1\}//;p}' "$0"
    exit 2
    ;;
esac
