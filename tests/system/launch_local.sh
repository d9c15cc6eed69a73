#!/usr/bin/env bash
# End to end through the real `dscpp` binary with the local runner:
#   dscpp --num_procs 4 --master_port P -- sh -c SCRIPT TOKEN
# 1. four ranks print their rank environment; every line comes back prefixed "[rank R]";
# 2. rank 2 exits 4: dscpp exits 4, stderr names rank 2 and code 4, no process of the job is left;
# 3. SIGINT (then SIGTERM) to dscpp while four ranks sleep: dscpp exits 130 (143), nothing left.
# "Nothing left": every rank prints its pid and its background child's pid, which must be gone
# from /proc (zombies included — an unreaped zombie would be PID 1's to collect here, and
# PID 1 does not), and `pgrep -f TOKEN` (TOKEN is each rank's $0) finds nothing.
# Usage: launch_local.sh PATH_TO_DSCPP. Exit 77 (skip) while dscpp has no --num_procs.
set -u
DSCPP=${1:?usage: launch_local.sh PATH_TO_DSCPP}

if ! "$DSCPP" --help 2>&1 | grep -q -- '--num_procs'; then
  echo "launch_local: '$DSCPP --help' lists no --num_procs (the local launcher CLI is not there yet): skipping"
  exit 77
fi

WORK=$(mktemp -d /tmp/dscpp_launch_local.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
now_ms() { date +%s%3N; }
. "$(dirname "$0")/free_port.sh"  # port

# Fails when any pid printed as "pid N" / "child N" in $1 still has a /proc entry, or when
# a process whose argv holds the token is still running.
check_nothing_left() {
  local output=$1 token=$2 what=$3 pid left=""
  for pid in $(grep -oE '(pid|child) [0-9]+' "$output" | awk '{print $2}'); do
    if [ -e "/proc/$pid" ]; then left="$left $pid($(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null))"; fi
  done
  local by_name
  by_name=$(pgrep -f "$token" | tr '\n' ' ')
  [ -z "$left" ] || fail "$what: processes of the job still in /proc (pid(state)):$left"
  [ -z "$by_name" ] || fail "$what: pgrep -f finds the job's processes: $by_name"
}

# Waits (up to 10 s) until $1 holds $2 lines matching $3.
wait_for_lines() {
  local i n
  for i in $(seq 1 100); do
    n=$(grep -c -- "$3" "$1" 2>/dev/null)
    [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# ---- 1. success: rank environment and prefixes ------------------------------------------
TOKEN=dscpp_ll_ok_$$_$RANDOM
P=$(port)
"$DSCPP" --num_procs 4 --master_port "$P" -- sh -c \
  'echo "env $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT"; printf "partial $RANK"' "$TOKEN" \
  >"$WORK/ok.out" 2>"$WORK/ok.err"
code=$?
[ "$code" = 0 ] || fail "success case: dscpp exited $code (stderr: $(cat "$WORK/ok.err"))"
for r in 0 1 2 3; do
  grep -qxF "[rank $r] env $r $r 4 127.0.0.1 $P" "$WORK/ok.out" ||
    fail "success case: no line '[rank $r] env $r $r 4 127.0.0.1 $P' in: $(cat "$WORK/ok.out")"
  grep -qxF "[rank $r] partial $r" "$WORK/ok.out" || fail "success case: rank $r's partial last line was not flushed"
done
unprefixed=$(grep -vE '^\[rank [0-3]\] ' "$WORK/ok.out")
[ -z "$unprefixed" ] || fail "success case: unprefixed stdout lines: $unprefixed"

# ---- 2. rank 2 exits 3 -------------------------------------------------------------------
TOKEN=dscpp_ll_fail_$$_$RANDOM
start=$(now_ms)
"$DSCPP" --num_procs 4 --master_port "$(port)" -- sh -c \
  'sleep 60 & echo "pid $$ child $!"; if [ "$RANK" = 2 ]; then sleep 1; echo "rank 2 fails" >&2; exit 4; fi; wait' \
  "$TOKEN" >"$WORK/fail.out" 2>"$WORK/fail.err"
code=$?
elapsed=$(( $(now_ms) - start ))
[ "$code" = 4 ] || fail "failure case: dscpp exited $code, expected 4"
grep -qE 'rank 2( on [^ ]+)? exited with code 4' "$WORK/fail.err" ||
  fail "failure case: stderr does not name rank 2 and code 4: $(cat "$WORK/fail.err")"
grep -qxF '[rank 2] rank 2 fails' "$WORK/fail.err" || fail "failure case: rank 2's stderr line missing or unprefixed"
[ "$(grep -c '^\[rank [0-3]\] pid ' "$WORK/fail.out")" = 4 ] || fail "failure case: not all 4 ranks reported their pids"
[ "$elapsed" -lt 4000 ] || fail "failure case: dscpp took ${elapsed} ms (rank 2 fails after 1000 ms)"
echo "failure case: dscpp exited $((elapsed - 1000)) ms after rank 2's failure"
check_nothing_left "$WORK/fail.out" "$TOKEN" "failure case"

# ---- 3. SIGINT / SIGTERM to dscpp --------------------------------------------------------
# Job control on: a background job of a non-interactive shell would otherwise start with
# SIGINT ignored (and dscpp, like any program, keeps an inherited "ignore").
set -m
for sig in INT TERM; do
  expected=$([ "$sig" = INT ] && echo 130 || echo 143)
  TOKEN=dscpp_ll_${sig}_$$_$RANDOM
  "$DSCPP" --num_procs 4 --master_port "$(port)" -- sh -c 'sleep 60 & echo "pid $$ child $!"; wait' "$TOKEN" \
    >"$WORK/$sig.out" 2>"$WORK/$sig.err" &
  dscpp_pid=$!
  if ! wait_for_lines "$WORK/$sig.out" 4 '^\[rank [0-3]\] pid '; then
    fail "SIG$sig case: the 4 ranks did not start within 10 s: $(cat "$WORK/$sig.out" "$WORK/$sig.err")"
    kill -KILL "$dscpp_pid" 2>/dev/null
  fi
  start=$(now_ms)
  kill -"$sig" "$dscpp_pid"
  wait "$dscpp_pid"
  code=$?
  elapsed=$(( $(now_ms) - start ))
  [ "$code" = "$expected" ] || fail "SIG$sig case: dscpp exited $code, expected $expected (stderr: $(cat "$WORK/$sig.err"))"
  [ "$elapsed" -lt 3000 ] || fail "SIG$sig case: dscpp took ${elapsed} ms to stop"
  echo "SIG$sig case: dscpp exited ${elapsed} ms after the signal"
  check_nothing_left "$WORK/$sig.out" "$TOKEN" "SIG$sig case"
done
set +m

[ "$FAILED" = 0 ] && echo "launch_local: all checks passed"
exit "$FAILED"
