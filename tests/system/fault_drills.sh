#!/usr/bin/env bash
# Fault drills through the launcher (the mlp example, 2 ranks). A stalled rank ends the job
# within its stated bound, whichever rank it is (DSCPP_COMM_TIMEOUT=6 s, one rank stopped with
# SIGSTOP while training):
#  1. rank 1 stopped: rank 0 (the store's host) reports the hang and the job ends within
#     timeout + 12 s;
#  2. rank 0 stopped — the store's host, so every store call of rank 1's hang report and exit
#     meets a stalled host: the job still ends within timeout + 2 × reply timeout (3 s) + 12 s,
#     where it used to wait out a fixed 300 s reply timeout twice;
# each time the launcher exits non-zero, the report states the group timeout, and no process of
# the job is left behind.
#  3. blame: rank 1 fails on its own and lingers 1 s after closing its connections, so rank 0
#     (which exits with code 3, "stopped because another failed") is seen to exit first; over
#     6 runs the launcher names rank 1 every time.
# Usage: fault_drills.sh DSCPP MLP_SO
set -u
DSCPP=$1 MLP=$2
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "fault_drills: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): skipping"
  exit 77
fi
WORK=$(mktemp -d /tmp/dscpp_stalled.XXXXXX)
cleanup() {
  for p in $(pgrep -f "$WORK/" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
TIMEOUT=6
cat > "$WORK/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 20, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}
JSON

# drill RANK BOUND: stops RANK once training runs; the job must end within BOUND seconds.
drill() {
  local victim=$1 bound=$2 log=$WORK/stop$1.log pid="" t0 t1 rc
  DSCPP_COMM_TIMEOUT=$TIMEOUT "$DSCPP" --num_procs 2 --master_port "$(port)" "$MLP" --deepspeed_config "$WORK/c.json" \
    --no_eval --steps 1000000 -- --limit 512 --hidden 16 > "$log" 2>&1 &
  local launcher=$!
  touch "$log"
  for _ in $(seq 300); do grep -q "step [0-9]*/1000000" "$log" && break; sleep 0.1; done
  for p in $(pgrep -f "$WORK/c.json"); do
    [ "$p" = "$launcher" ] && continue
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$victim" && pid=$p
  done
  if [ -z "$pid" ]; then
    fail "rank $victim: no running rank process found: $(tail -3 "$log")"
    kill "$launcher" 2>/dev/null; wait "$launcher"
    return
  fi
  kill -STOP "$pid"
  t0=$(date +%s.%N)
  wait "$launcher"
  rc=$?
  t1=$(date +%s.%N)
  local took
  took=$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
  echo "rank $victim stopped: the job ended after $took s (bound $bound s), exit $rc; its last error:"
  grep "error" "$log" | tail -1
  [ "$rc" != 0 ] && awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t <= b) }' &&
    pass "rank $victim stopped: the launcher exits $rc after $took s (bound $bound s)" ||
    fail "rank $victim stopped: exit $rc after $took s (bound $bound s): $(grep -i "error" "$log" | head -3)"
  grep -q "did not complete within the group timeout ($TIMEOUT s" "$log" &&
    pass "rank $victim stopped: the hang report states the group timeout" ||
    fail "rank $victim stopped: no hang report with the group timeout: $(grep -i "error" "$log" | head -3)"
  kill -CONT "$pid" 2>/dev/null
  sleep 0.5
  local left
  left=$(pgrep -f "$WORK/c.json" | tr '\n' ' ')
  [ -z "$left" ] && pass "rank $victim stopped: no process of the job is left" ||
    fail "rank $victim stopped: processes left behind: $left"
}

# The bounds: timeout + forensics (~6 s) + the launcher's 3 s wait for a rank that failed on its
# own (the reporting rank exits "because another failed"), + 2 reply timeouts when rank 0 stalls.
drill 1 $((TIMEOUT + 6 + 3 + 3))
drill 0 $((TIMEOUT + 2 * 3 + 6 + 3 + 3))

# ---- 3. blame the rank that failed first in cause ------------------------------------------
right=0 runs=6
for i in $(seq $runs); do
  DSCPP_FAULT_INJECT=fail_slowly "$DSCPP" --num_procs 2 --master_port "$(port)" "$MLP" --deepspeed_config "$WORK/c.json" \
    --no_eval --steps 10 -- --limit 512 --hidden 16 > "$WORK/blame$i.log" 2>&1 && fail "blame run $i: exit 0"
  grep -qE "^dscpp: rank 1 (on [^ ]+ )?exited with code 1" "$WORK/blame$i.log" && right=$((right + 1)) ||
    echo "blame run $i: $(grep "^dscpp:" "$WORK/blame$i.log" | head -2)"
done
[ "$right" = "$runs" ] && pass "blame: rank 1, which failed on its own, is named in $right of $runs runs" ||
  fail "blame: rank 1 named in $right of $runs runs"
grep -q "rank 0 had stopped because of a peer's failure" "$WORK"/blame*.log &&
  pass "blame: the bystander is said to have stopped because of it" ||
  fail "blame: no run showed rank 0 exiting first (the drill did not race as designed)"
grep -q "this rank stopped because another failed" "$WORK"/blame*.log &&
  pass "blame: rank 0's own error says it stopped because another failed" ||
  fail "blame: rank 0's error does not say why it stopped"
exit $FAILED
