#!/usr/bin/env bash
# dscpp inside a real SLURM allocation (tests/testbed/slurm-local.sh, 2 nodes): the
# shipped sbatch script runs dscpp once (found beside the script, with no DSCPP and no PATH
# entry); dscpp reads the allocation, starts 4 ranks through srun, each with the right
# RANK/LOCAL_RANK/WORLD_SIZE/CROSS_RANK/MASTER_*. The job's exit code is the failing rank's
# own (scontrol's ExitCode), and dscpp names that rank and its node: a rank exiting 4, a rank
# killed by SIGKILL (137), a config error (the code the same config gives on the local
# runner), a rank that fails on its own while another exits first "because a peer failed"
# (a shell stand-in, and the runtime's fail_slowly drill on the mlp example), and with
# --max_restarts the restart line names the rank.
#   launch_slurm.sh DSCPP SOURCE_ROOT MLP_SO
# The testbed script comes from SOURCE_ROOT/tests/testbed, or from $DSCPP_TESTBED when set.
# Needs root and SLURM + MUNGE (scripts/setup.sh test); exits 77 (skip) otherwise.
set -u
dscpp=$(readlink -f "$1") root=$(readlink -f "$2") mlp=$(readlink -f "$3")
[ "$(id -u)" = 0 ] || { echo "needs root (slurmd runs jobs as root here)"; exit 77; }
testbed=${DSCPP_TESTBED:-$root/tests/testbed}
[ -x "$testbed/slurm-local.sh" ] || { echo "FAIL: testbed script $testbed/slurm-local.sh missing or not executable"; exit 1; }
for b in slurmctld slurmd munged; do
  command -v $b >/dev/null || { echo "SLURM/MUNGE is not installed (scripts/setup.sh test)"; exit 77; }
done

export SLURM_LOCAL_DIR=/tmp/dscpp-slurm-$$ SLURM_LOCAL_PORT=$((17000 + $$ % 2000))
S=$testbed/slurm-local.sh
tmp=$(mktemp -d)
cleanup() { "$S" down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
"$S" up 2 >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; echo "FAIL: slurm-local.sh up"; exit 1; }
eval "$("$S" env)"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Waits for job $1 to leave the queue (at most $2 seconds); prints its ExitCode.
wait_job() {
  local j=$1 limit=$2 start=$SECONDS
  while [ -n "$(squeue -h -j "$j" 2>/dev/null)" ]; do
    [ $((SECONDS - start)) -lt "$limit" ] || { scancel "$j"; echo "timeout"; return; }
    sleep 0.2
  done
  scontrol show job "$j" 2>/dev/null | grep -o 'ExitCode=[0-9:]*' | head -1
}

probe='echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_SIZE=$LOCAL_SIZE CROSS_RANK=$CROSS_RANK CROSS_SIZE=$CROSS_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"'
t0=$SECONDS
j=$(sbatch --parsable --chdir="$tmp" --output="$tmp/ok.out" --export=ALL,DSCPP="$dscpp" \
  "$root/hostfiles/sbatch-dscpp.sh" sh -c "$probe")
code=$(wait_job "$j" 60)
echo "job $j: $code in $((SECONDS - t0)) s"
[ "$code" = "ExitCode=0:0" ] || fail "4-rank job ended with $code: $(cat "$tmp/ok.out")"
for r in 0 1 2 3; do
  lr=$((r % 2)) node=$((r / 2))
  grep -q "^\[rank $r [^]]*\] RANK=$r LOCAL_RANK=$lr WORLD_SIZE=4 LOCAL_SIZE=2 CROSS_RANK=$node CROSS_SIZE=2 MASTER_ADDR=[0-9.]* MASTER_PORT=29500$" "$tmp/ok.out" ||
    fail "rank $r line missing or wrong: $(cat "$tmp/ok.out")"
done

# submit NAME SECONDS PROGRAM...: the shipped script with DSCPP (and $job_env, K=V) given;
# prints "ExitCode=C:S"; the output is $tmp/NAME.out.
submit() {
  local name=$1 limit=$2 j
  shift 2
  j=$(sbatch --parsable --chdir="$tmp" --output="$tmp/$name.out" --export=ALL,DSCPP="$dscpp"${job_env:+,$job_env} \
    "$root/hostfiles/sbatch-dscpp.sh" "$@")
  wait_job "$j" "$limit"
}
# expect NAME CODE PATTERN SECONDS PROGRAM...: the job ends with ExitCode=CODE:0 within SECONDS
# and its output has a "dscpp: " line matching PATTERN.
expect() {
  local name=$1 code=$2 pattern=$3 limit=$4 got t0=$SECONDS
  shift 4
  got=$(submit "$name" "$limit" "$@")
  echo "$name: $got in $((SECONDS - t0)) s: $(grep -E "^dscpp: " "$tmp/$name.out" | head -2 | tr '\n' ' ')"
  [ "$got" = "ExitCode=$code:0" ] || fail "$name: $got, expected ExitCode=$code:0: $(cat "$tmp/$name.out")"
  grep -qE "^dscpp: $pattern" "$tmp/$name.out" || fail "$name: no line matching '^dscpp: $pattern': $(cat "$tmp/$name.out")"
}

expect exit4 4 "rank 2 on node2 exited with code 4; stopping the other ranks$" 45 \
  sh -c 'if [ "$RANK" = 2 ]; then sleep 0.5; exit 4; fi; exec sleep 60'
expect kill9 137 "rank 1 on node1 killed by signal KILL; stopping" 45 \
  sh -c 'if [ "$RANK" = 1 ]; then sleep 0.5; kill -9 $$; fi; exec sleep 60'
# Rank 0 stops "because a peer failed" (code 3) first; rank 3 fails on its own a second later.
expect bystander 1 "rank 3 on node2 exited with code 1 \(rank 0 had stopped because of a peer's failure\)" 45 \
  sh -c 'case $RANK in 0) sleep 0.3; exit 3;; 3) sleep 1.3; exit 1;; esac; exec sleep 60'
# A whole restart: rank 2 fails in the first attempt only.
expect restart 0 "rank 2 on node2 exited with code 4; restarting the job \(restart 1 of 1\)" 60 \
  --max_restarts 1 sh -c 'if [ "$RANK" = 2 ] && [ "$DSCPP_RESTART_COUNT" = 0 ]; then exit 4; fi; echo "attempt $DSCPP_RESTART_COUNT"'

if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  # A config error: the code the local runner gives for the same config (the runtime's own).
  echo '{"train_micro_batch_size_per_gpu": 4, "optimizr": {"type": "AdamW"}}' >"$tmp/bad.json"
  "$dscpp" --num_procs 1 "$mlp" --deepspeed_config "$tmp/bad.json" --steps 2 -- --limit 64 --hidden 8 >/dev/null 2>&1
  local_code=$?
  [ "$local_code" != 0 ] || fail "the local runner accepted a config with a typo"
  expect bad_config "$local_code" "rank [0-3] on node[12] exited with code $local_code" 60 \
    "$mlp" --deepspeed_config "$tmp/bad.json" --steps 2 -- --limit 64 --hidden 8
  grep -q "optimizr: unknown key; did you mean optimizer" "$tmp/bad_config.out" || fail "bad_config: the config error is not shown"
  # The runtime's drill: the last rank (3, on node2) fails at step 2 and lingers 1 s after
  # closing its connections, so the others see it go and exit 3 first.
  echo '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}' \
    >"$tmp/ok.json"
  job_env=DSCPP_FAULT_INJECT=fail_slowly expect fail_slowly 1 "rank 3 on node2 exited with code 1" 90 \
    "$mlp" --deepspeed_config "$tmp/ok.json" --no_eval --steps 10 -- --limit 256 --hidden 16
  grep -q "rank 3 fails at step 2" "$tmp/fail_slowly.out" || fail "fail_slowly: the drill did not run"
else
  echo "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): config-error and fail_slowly jobs skipped"
fi

# The template finds dscpp beside itself as submitted (here: the build tree's), with neither
# DSCPP nor a PATH entry; elsewhere it says what to do, exit 127.
t0=$SECONDS
j=$(cd "$root" && env -u DSCPP PATH=/usr/bin:/bin sbatch --parsable --chdir="$tmp" --output="$tmp/find.out" \
  hostfiles/sbatch-dscpp.sh true)
code=$(wait_job "$j" 45)
if [ -x "$root/build/launcher/dscpp" ]; then
  [ "$code" = "ExitCode=0:0" ] && grep -q "dscpp plan:" "$tmp/find.out" ||
    fail "the template did not find $root/build/launcher/dscpp: $code: $(cat "$tmp/find.out")"
fi
cp "$root/hostfiles/sbatch-dscpp.sh" "$tmp/alone.sh"
j=$(env -u DSCPP PATH=/usr/bin:/bin sbatch --parsable --chdir="$tmp" --output="$tmp/alone.out" "$tmp/alone.sh" true)
code=$(wait_job "$j" 45)
[ "$code" = "ExitCode=127:0" ] && grep -q "cannot find dscpp: .*--export=ALL,DSCPP=" "$tmp/alone.out" ||
  fail "a template with no dscpp near it: $code: $(cat "$tmp/alone.out")"
echo "template without DSCPP: found beside the script, else a clear message ($((SECONDS - t0)) s)"

[ "$failures" = 0 ] && echo "launch_slurm: all checks passed"
exit $(( failures > 0 ))
