#!/usr/bin/env bash
# `dscpp --max_restarts K` end to end through the real binary (local runner, and openmpi when
# mpirun is installed). The rank program ($WORK/prog.sh MODE TOKEN) prints
# "attempt A rank R te TA/TM port P pid N" (A = DSCPP_RESTART_COUNT, TA/TM = torchrun's
# TORCHELASTIC_RESTART_COUNT/MAX_RESTARTS); on attempt 0 it also starts a background child
# ("child N") that must die with the job. MODE:
#   once   rank 1 exits 3 on attempt 0 (the others wait); attempt >= 1 succeeds
#   always rank 1 exits 3 on every attempt
#   sleep  every rank waits (for the SIGTERM case)
# Cases:
# 1. once, --num_gpus 3 --max_restarts 2: exit 0, the restart line, every rank of attempt 1 saw
#    DSCPP_RESTART_COUNT=1 and the same MASTER_PORT, no process of attempt 0 left;
# 2. always, --max_restarts 2: exactly 3 attempts, exit 4, "no restarts left (2 used)";
# 3. once, no --max_restarts: exit 4, one attempt, no restart message (behaviour as before);
# 4. sleep, --max_restarts 2, SIGINT (SIGTERM) to dscpp during attempt 0: exit 130 (143), no restart,
#    nothing left;
# 5. once under --launcher openmpi --max_restarts 1: exit 0 after one restart, nothing left;
# 6. --max_restarts -1 is refused.
# Every dscpp run is bounded by `timeout`. Usage: launch_restart.sh PATH_TO_DSCPP.
set -u
DSCPP=$(readlink -f "${1:?usage: launch_restart.sh PATH_TO_DSCPP}")

if ! "$DSCPP" --help 2>&1 | grep -q -- '--max_restarts'; then
  echo "launch_restart: '$DSCPP --help' lists no --max_restarts: skipping"
  exit 77
fi

WORK=$(mktemp -d /tmp/dscpp_launch_restart.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
now_ms() { date +%s%3N; }
. "$(dirname "$0")/free_port.sh"  # port

cat >"$WORK/prog.sh" <<'EOF'
#!/bin/sh
mode=$1
echo "attempt $DSCPP_RESTART_COUNT rank $RANK te $TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS port $MASTER_PORT pid $$"
if [ "$DSCPP_RESTART_COUNT" = 0 ]; then
  sleep 60 &
  echo "child $!"
fi
case $mode in
  once) [ "$DSCPP_RESTART_COUNT" != 0 ] && exit 0 ;;
  always) ;;
  sleep) wait; exit 0 ;;
esac
if [ "$RANK" = 1 ]; then sleep 0.3; echo "rank 1 fails" >&2; exit 4; fi
wait
EOF
chmod +x "$WORK/prog.sh"

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

count() { grep -c -- "$2" "$1"; }

# ---- 1. rank 1 fails once; the restart succeeds ------------------------------------------
TOKEN=dscpp_lr_once_$$_$RANDOM
P=$(port)
start=$(now_ms)
timeout -k 5 30 "$DSCPP" --num_gpus 3 --max_restarts 2 --master_port "$P" "$WORK/prog.sh" once "$TOKEN" \
  >"$WORK/once.out" 2>"$WORK/once.err"
code=$?
elapsed=$(( $(now_ms) - start ))
[ "$code" = 0 ] || fail "fail-once case: dscpp exited $code, expected 0 (stderr: $(cat "$WORK/once.err"))"
grep -qE '^dscpp: rank 1 on [^ ]+ exited with code 4; restarting the job \(restart 1 of 2\)$' "$WORK/once.err" ||
  fail "fail-once case: no restart line naming rank 1 in: $(cat "$WORK/once.err")"
for r in 0 1 2; do
  grep -qxE "\[rank $r\] attempt 0 rank $r te 0/2 port $P pid [0-9]+" "$WORK/once.out" ||
    fail "fail-once case: rank $r's attempt 0 line missing"
  grep -qxE "\[rank $r\] attempt 1 rank $r te 1/2 port $P pid [0-9]+" "$WORK/once.out" ||
    fail "fail-once case: rank $r of attempt 1 did not see DSCPP_RESTART_COUNT=1, TORCHELASTIC 1/2 and port $P"
done
[ "$(count "$WORK/once.out" '] attempt ')" = 6 ] || fail "fail-once case: expected 6 attempt lines: $(cat "$WORK/once.out")"
grep -q 'no restarts left' "$WORK/once.err" && fail "fail-once case: says 'no restarts left'"
[ "$elapsed" -lt 8000 ] || fail "fail-once case: took ${elapsed} ms"
echo "fail-once case: exit 0 after one restart in ${elapsed} ms"
check_nothing_left "$WORK/once.out" "$TOKEN" "fail-once case"

# ---- 2. rank 1 always fails: 3 attempts, then its status ---------------------------------
TOKEN=dscpp_lr_always_$$_$RANDOM
start=$(now_ms)
timeout -k 5 30 "$DSCPP" --num_procs 3 --max_restarts 2 --master_port "$(port)" "$WORK/prog.sh" always "$TOKEN" \
  >"$WORK/always.out" 2>"$WORK/always.err"
code=$?
elapsed=$(( $(now_ms) - start ))
[ "$code" = 4 ] || fail "always-failing case: dscpp exited $code, expected 4 (stderr: $(cat "$WORK/always.err"))"
attempts=$(grep -oE '^\[rank 1\] attempt [0-9]+' "$WORK/always.out" | awk '{print $4}' | tr '\n' ' ')
[ "$attempts" = "0 1 2 " ] || fail "always-failing case: rank 1 ran attempts '$attempts', expected '0 1 2 '"
[ "$(count "$WORK/always.err" 'restarting the job')" = 2 ] || fail "always-failing case: expected 2 restart lines"
grep -q 'restarting the job (restart 2 of 2)' "$WORK/always.err" || fail "always-failing case: no 'restart 2 of 2'"
grep -qE '^dscpp: rank 1 on [^ ]+ exited with code 4; no restarts left \(2 used\)$' "$WORK/always.err" ||
  fail "always-failing case: no 'no restarts left (2 used)' line in: $(cat "$WORK/always.err")"
[ "$elapsed" -lt 10000 ] || fail "always-failing case: took ${elapsed} ms"
echo "always-failing case: exit 4 after 3 attempts in ${elapsed} ms"
check_nothing_left "$WORK/always.out" "$TOKEN" "always-failing case"

# ---- 3. default: no restart ---------------------------------------------------------------
TOKEN=dscpp_lr_default_$$_$RANDOM
start=$(now_ms)
timeout -k 5 30 "$DSCPP" --num_procs 3 --master_port "$(port)" "$WORK/prog.sh" once "$TOKEN" \
  >"$WORK/default.out" 2>"$WORK/default.err"
code=$?
elapsed=$(( $(now_ms) - start ))
[ "$code" = 4 ] || fail "default case: dscpp exited $code, expected 4"
grep -qE 'rank 1 on [^ ]+ exited with code 4; stopping the other ranks' "$WORK/default.err" ||
  fail "default case: failure not named as before: $(cat "$WORK/default.err")"
grep -qE 'restart' "$WORK/default.err" && fail "default case: mentions restarts: $(cat "$WORK/default.err")"
[ "$(count "$WORK/default.out" '] attempt 0 rank [0-2] te 0/0 ')" = 3 ] ||
  fail "default case: expected 4 attempt-0 lines with TORCHELASTIC 0/0: $(cat "$WORK/default.out")"
grep -q '] attempt 1 ' "$WORK/default.out" && fail "default case: a second attempt ran"
echo "default case: exit 4, no restart, in ${elapsed} ms"
check_nothing_left "$WORK/default.out" "$TOKEN" "default case"

# ---- 4. SIGINT / SIGTERM to dscpp are a stop, never a restart ------------------------------
set -m  # as in launch_local.sh: background jobs of a script would otherwise ignore SIGINT
for sig in INT TERM; do
  expected=$([ "$sig" = INT ] && echo 130 || echo 143)
  TOKEN=dscpp_lr_${sig}_$$_$RANDOM
  timeout -k 5 30 "$DSCPP" --num_procs 3 --max_restarts 2 --master_port "$(port)" "$WORK/prog.sh" sleep "$TOKEN" \
    >"$WORK/$sig.out" 2>"$WORK/$sig.err" &
  timeout_pid=$!
  if wait_for_lines "$WORK/$sig.out" 3 '^\[rank [0-2]\] child '; then
    dscpp_pid=$(pgrep -P "$timeout_pid" | head -1)
    start=$(now_ms)
    kill -"$sig" "$dscpp_pid"
    wait "$timeout_pid"
    code=$?
    elapsed=$(( $(now_ms) - start ))
    [ "$code" = "$expected" ] ||
      fail "SIG$sig case: dscpp exited $code, expected $expected (stderr: $(cat "$WORK/$sig.err"))"
    grep -q 'restart' "$WORK/$sig.err" && fail "SIG$sig case: mentions a restart: $(cat "$WORK/$sig.err")"
    grep -q '] attempt 1 ' "$WORK/$sig.out" && fail "SIG$sig case: a second attempt ran"
    [ "$elapsed" -lt 5000 ] || fail "SIG$sig case: dscpp took ${elapsed} ms to stop"
    echo "SIG$sig case: exit $code, no restart, ${elapsed} ms after the signal"
  else
    fail "SIG$sig case: the 3 ranks did not start within 10 s: $(cat "$WORK/$sig.out" "$WORK/$sig.err")"
    kill -KILL "$timeout_pid" 2>/dev/null
    wait "$timeout_pid" 2>/dev/null
  fi
  check_nothing_left "$WORK/$sig.out" "$TOKEN" "SIG$sig case"
done
set +m

# ---- 5. the same restart through mpirun ---------------------------------------------------
if command -v mpirun >/dev/null; then
  TOKEN=dscpp_lr_mpi_$$_$RANDOM
  start=$(now_ms)
  timeout -k 5 40 "$DSCPP" --launcher openmpi --num_procs 3 --max_restarts 1 --master_port "$(port)" \
    "$WORK/prog.sh" once "$TOKEN" >"$WORK/mpi.out" 2>"$WORK/mpi.err"
  code=$?
  elapsed=$(( $(now_ms) - start ))
  [ "$code" = 0 ] || fail "openmpi case: dscpp exited $code, expected 0 (stderr: $(cat "$WORK/mpi.err"))"
  grep -q 'rank 1 on .* exited with code 4' "$WORK/mpi.err" || fail "openmpi case: rank 1's failure not named"
  # the rank's own code and name, not mpirun's
  grep -qE '^dscpp: rank 1 on \S+ exited with code 4; restarting the job \(restart 1 of 1\)$' "$WORK/mpi.err" ||
    fail "openmpi case: no restart line in: $(cat "$WORK/mpi.err")"
  for r in 0 1 2; do
    grep -qE "^\[rank $r\] attempt 1 rank $r te 1/1 " "$WORK/mpi.out" ||
      fail "openmpi case: rank $r of attempt 1 did not see DSCPP_RESTART_COUNT=1: $(cat "$WORK/mpi.out")"
  done
  [ "$elapsed" -lt 20000 ] || fail "openmpi case: took ${elapsed} ms"
  echo "openmpi case: exit 0 after one restart in ${elapsed} ms"
  sleep 0.5  # mpirun's daemons may still be on their way out
  check_nothing_left "$WORK/mpi.out" "$TOKEN" "openmpi case"
else
  echo "openmpi case: mpirun not installed, skipped"
fi

# ---- 6. a negative count is refused -------------------------------------------------------
"$DSCPP" --max_restarts -1 --num_procs 1 -- true >"$WORK/neg.out" 2>"$WORK/neg.err"
code=$?
[ "$code" = 1 ] || fail "--max_restarts -1: dscpp exited $code, expected 1"
grep -q -- '--max_restarts -1: expected 0 or more' "$WORK/neg.err" || fail "--max_restarts -1: $(cat "$WORK/neg.err")"

[ "$FAILED" = 0 ] && echo "launch_restart: all checks passed"
exit "$FAILED"
