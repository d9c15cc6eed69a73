#!/usr/bin/env bash
# A stalled rank ends the job within its stated bound, whichever rank it is (the mlp example,
# 2 ranks through the launcher, DSCPP_COMM_TIMEOUT=6 s, one rank stopped with SIGSTOP while
# training):
#  1. rank 1 stopped: rank 0 (the store's host) reports the hang and the job ends within
#     timeout + 10 s;
#  2. rank 0 stopped — the store's host, so every store call of rank 1's hang report and exit
#     meets a stalled host: the job still ends within timeout + 2 × reply timeout (3 s) + 10 s,
#     where it used to wait out a fixed 300 s reply timeout twice;
# each time the launcher exits non-zero, the report states the group timeout, and no process of
# the job is left behind.
# Usage: stalled_rank.sh DSCPP MLP_SO
set -u
DSCPP=$1 MLP=$2
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "stalled_rank: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): skipping"
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

drill 1 $((TIMEOUT + 10))
drill 0 $((TIMEOUT + 2 * 3 + 10))
exit $FAILED
