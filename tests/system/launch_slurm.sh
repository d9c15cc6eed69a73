#!/usr/bin/env bash
# dscpp inside a real SLURM allocation (tests/testbed/slurm-local.sh, 2 nodes): the
# shipped sbatch script runs dscpp once; dscpp reads the allocation, starts 4 ranks through
# srun, each with the right RANK/LOCAL_RANK/WORLD_SIZE/CROSS_RANK/MASTER_*; a failing rank
# ends the job quickly with its code named.
#   launch_slurm.sh DSCPP SOURCE_ROOT
# The testbed script comes from SOURCE_ROOT/tests/testbed, or from $DSCPP_TESTBED when set.
# Needs root and SLURM + MUNGE (scripts/setup.sh test); exits 77 (skip) otherwise.
set -u
dscpp=$(readlink -f "$1") root=$(readlink -f "$2")
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

t0=$SECONDS
j=$(sbatch --parsable --chdir="$tmp" --output="$tmp/bad.out" --export=ALL,DSCPP="$dscpp" \
  "$root/hostfiles/sbatch-dscpp.sh" sh -c 'if [ "$RANK" = 2 ]; then exit 4; fi; exec sleep 60')
code=$(wait_job "$j" 45)
echo "failing job $j: $code in $((SECONDS - t0)) s"
[ "$code" != "ExitCode=0:0" ] && [ "$code" != timeout ] || fail "a failing rank did not end the job: $code"
[ $((SECONDS - t0)) -lt 30 ] || fail "the job took $((SECONDS - t0)) s to stop after rank 2 failed"
grep -q "rank 2 .*exited with code 4" "$tmp/bad.out" || fail "rank 2's failure not named: $(cat "$tmp/bad.out")"

[ "$failures" = 0 ] && echo "launch_slurm: all checks passed"
exit $(( failures > 0 ))
