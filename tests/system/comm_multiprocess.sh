#!/bin/bash
# The Communicator across real processes:
# 1. the correctness matrix on 2, 3 and 4 ranks started by `dscpp` (shm on one host; gloo
#    forced; hierarchical shm+gloo with 2 ranks per "host" forced by DSCPP_RANKS_PER_NODE),
#    and on 3 ranks under mpirun with the mpi backend when OpenMPI is present; each engine
#    again with its buffers in cuda-sim's device memory (DSCPP_TEST_DEVICE=cuda-sim), staged;
#    the schedule check (DSCPP_CHECK_SCHEDULE=1) on shm, gloo, hierarchical and mpi: a checked
#    matrix passes, then a rank that skips an op fails every rank at once with one message;
# 2. failures with ranks started by hand (so no launcher tears the job down first):
#    a rank that never arrives, a rank that stops communicating, a rank that dies — every other
#    rank must fail within the timeout with a message naming the culprit.
# Usage: comm_multiprocess.sh DSCPP COMM_CHECK [small]
set -u
DSCPP=${1:?usage: comm_multiprocess.sh DSCPP COMM_CHECK [small]}
CHECK=${2:?usage: comm_multiprocess.sh DSCPP COMM_CHECK [small]}
SIZE=${3:-}
WORK=$(mktemp -d /tmp/dscpp_comm_mp.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
. "$(dirname "$0")/free_port.sh"  # port
# Ranks started without dscpp (mpirun, by hand) get the job's secret as a user's script gives it
# (docs/security.md): exported, and named to mpirun with -x. dscpp's launches use it as well.
DSCPP_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n'); export DSCPP_JOB_SECRET

matrix() {  # name nprocs size [VAR=value...] -- launches through dscpp; size "small" or "" (+ tens of MB)
  local name=$1 n=$2 size=$3 log="$WORK/$1.log" passed
  shift 3
  if ! env "$@" timeout 300 "$DSCPP" --num_procs "$n" --master_port "$(port)" "$CHECK" matrix $size >"$log" 2>&1; then
    fail "$name: dscpp exited non-zero"; sed 's/^/    /' "$log" | tail -20; return
  fi
  passed=$(grep -c "checks passed" "$log")
  [ "$passed" = "$n" ] || { fail "$name: $passed of $n ranks reported success"; tail -20 "$log"; return; }
  echo "ok  $name: $(grep -m1 'checks passed' "$log" | sed 's/.*checks passed on //')"
}

diverged() {  # name nprocs log: every rank failed within seconds, naming the skipped op and the checkpoint
  local name=$1 n=$2 log=$3 got
  got=$(grep -cE "FAILED AS EXPECTED after [0-4]\.[0-9] s: --check_schedule: ranks diverged in group 'world' at \
collective #[0-9]+ \(#2 since checkpoint 'end of step 0'\): ranks? [-0-9, ]+ issued allgather\(fp32, 1000 elements \
per rank\) but rank $((n - 1)) reached checkpoint 'end of step 1' after [0-9]+ collectives$" "$log")
  [ "$got" = "$n" ] || { fail "diverge $name: $got of $n ranks failed as expected"; tail -20 "$log"; return; }
  echo "ok  diverge $name: $(grep -m1 'FAILED AS EXPECTED' "$log" | sed 's/.*FAILED AS EXPECTED //' | cut -c1-300)"
}
diverge() {  # name nprocs [VAR=value...] -- through dscpp
  local name=$1 n=$2 log="$WORK/diverge-$1.log"
  shift 2
  if ! env DSCPP_CHECK_SCHEDULE=1 "$@" timeout 120 "$DSCPP" --num_procs "$n" --master_port "$(port)" "$CHECK" diverge \
      >"$log" 2>&1; then
    fail "diverge $name: dscpp exited non-zero"; tail -20 "$log"; return
  fi
  diverged "$name" "$n" "$log"
}

# The tens-of-MB operations (several engine chunks and segments each) run once per engine,
# on the odd rank counts whose uneven splits they are for; the other runs take the small matrix.
for n in 2 3 4; do matrix "shm-$n" "$n" "$([ $n = 3 ] && echo "$SIZE" || echo small)" DSCPP_COMM_BACKEND=auto; done
matrix gloo-3 3 "$SIZE" DSCPP_COMM_BACKEND=gloo
matrix hierarchical-4 4 "$SIZE" DSCPP_COMM_BACKEND=auto DSCPP_RANKS_PER_NODE=2
matrix hierarchical-6 6 small DSCPP_COMM_BACKEND=hierarchical DSCPP_RANKS_PER_NODE=3
# Device buffers (cuda-sim's protected memory, which these engines cannot touch): the
# Communicator stages them through host memory, in pieces of 4 KiB here.
DEV=(DSCPP_TEST_DEVICE=cuda-sim DSCPP_COMM_STAGING_BYTES=4096)
matrix shm-device-3 3 small DSCPP_COMM_BACKEND=shm "${DEV[@]}"
# The sanitizer build (SIZE=small) has the staging code's memory safety from test_comm_device.
if [ "$SIZE" != small ]; then
  matrix gloo-device-2 2 small DSCPP_COMM_BACKEND=gloo "${DEV[@]}"
  matrix hierarchical-device-4 4 small DSCPP_COMM_BACKEND=hierarchical DSCPP_RANKS_PER_NODE=2 "${DEV[@]}"
fi
diverge shm-3 3 DSCPP_COMM_BACKEND=shm
diverge gloo-2 2 DSCPP_COMM_BACKEND=gloo
diverge hierarchical-4 4 DSCPP_COMM_BACKEND=hierarchical DSCPP_RANKS_PER_NODE=2

if command -v mpirun >/dev/null; then
  # Under the sanitizer build, OpenMPI's own allocations (MCA components it unloads at finalize,
  # so unsymbolisable and unsuppressible by name) would be reported as leaks of our program.
  [ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"

  log="$WORK/mpi.log"
  if MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) DSCPP_COMM_BACKEND=mpi timeout 300 \
      mpirun --allow-run-as-root --oversubscribe -np 3 -x MASTER_ADDR -x MASTER_PORT -x DSCPP_JOB_SECRET \
      -x DSCPP_COMM_BACKEND "$CHECK" matrix $SIZE >"$log" 2>&1 && [ "$(grep -c 'checks passed' "$log")" = 3 ]; then
    echo "ok  mpi-3: $(grep -m1 'checks passed' "$log" | sed 's/.*checks passed on //')"
  else
    fail "mpi-3 under mpirun"; tail -20 "$log"
  fi
  log="$WORK/mpi-hier.log"
  if MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) DSCPP_RANKS_PER_NODE=2 timeout 300 \
      mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR -x MASTER_PORT -x DSCPP_JOB_SECRET \
      -x DSCPP_RANKS_PER_NODE "$CHECK" matrix $SIZE >"$log" 2>&1 && [ "$(grep -c 'checks passed' "$log")" = 4 ]; then
    echo "ok  mpi-hierarchical-4: $(grep -m1 'checks passed' "$log" | sed 's/.*checks passed on //')"
  else
    fail "hierarchical shm+mpi under mpirun"; tail -20 "$log"
  fi
  log="$WORK/mpi-device.log"
  if [ "$SIZE" = small ]; then
    echo "skip mpi-device-2 in the sanitizer build (test_comm_device covers the staging code)"
  elif MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) DSCPP_COMM_BACKEND=mpi DSCPP_TEST_DEVICE=cuda-sim \
      DSCPP_COMM_STAGING_BYTES=4096 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR \
      -x MASTER_PORT -x DSCPP_JOB_SECRET -x DSCPP_COMM_BACKEND -x DSCPP_TEST_DEVICE -x DSCPP_COMM_STAGING_BYTES \
      "$CHECK" matrix small >"$log" 2>&1 && [ "$(grep -c 'checks passed' "$log")" = 2 ]; then
    echo "ok  mpi-device-2: $(grep -m1 'checks passed' "$log" | sed 's/.*checks passed on //')"
  else
    fail "mpi-2 with device buffers under mpirun"; tail -20 "$log"
  fi
  log="$WORK/diverge-mpi.log"
  if MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) DSCPP_COMM_BACKEND=mpi DSCPP_CHECK_SCHEDULE=1 timeout 120 \
      mpirun --allow-run-as-root --oversubscribe -np 3 -x MASTER_ADDR -x MASTER_PORT -x DSCPP_JOB_SECRET \
      -x DSCPP_COMM_BACKEND -x DSCPP_CHECK_SCHEDULE "$CHECK" diverge >"$log" 2>&1; then
    diverged mpi-3 3 "$log"
  else
    fail "diverge mpi-3 under mpirun exited non-zero"; tail -20 "$log"
  fi
else
  echo "skip mpi: no mpirun"
fi

# ---- failures: ranks started by hand --------------------------------------------------------
start_ranks() {  # mode nprocs started backend -> pids in PIDS, logs $WORK/<mode>.<rank>
  local mode=$1 n=$2 started=$3 backend=$4 p r
  p=$(port); PIDS=()
  for r in $(seq 0 $((started - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$p DSCPP_COMM_BACKEND=$backend \
      DSCPP_COMM_TIMEOUT=3 DSCPP_RENDEZVOUS_TIMEOUT=3 "$CHECK" "$mode" >"$WORK/$mode.$backend.$r" 2>&1 &
    PIDS+=($!)
  done
}
expect_named() {  # mode backend ranks-that-must-fail pattern-for-rank-0
  # Every rank must fail; rank 0 must name the culprit. Others may name whoever failed first
  # next to them (rank 0 exiting after its own error closes connections too). A ring engine
  # (gloo) hears only from its neighbours, so rank 0 may first see rank 1 hang up; it then
  # names the culprit as the rank that recorded no failure in the store.
  local mode=$1 backend=$2 n=$3 pattern=$4 r
  for r in $(seq 0 $((n - 1))); do
    if ! wait "${PIDS[$r]}"; then fail "$mode/$backend: rank $r exited non-zero: $(cat "$WORK/$mode.$backend.$r")"; continue; fi
    grep -q "FAILED AS EXPECTED" "$WORK/$mode.$backend.$r" ||
      { fail "$mode/$backend: rank $r did not fail: $(cat "$WORK/$mode.$backend.$r")"; continue; }
    [ "$r" != 0 ] || grep -qE "$pattern" "$WORK/$mode.$backend.$r" ||
      fail "$mode/$backend: rank $r's error does not match /$pattern/: $(cat "$WORK/$mode.$backend".*)"
  done
  echo "ok  $mode/$backend: $(grep -h 'FAILED AS EXPECTED' "$WORK/$mode.$backend.0" | cut -c1-400)"
}

# The scenarios wait out 3-4 s timeouts with idle ranks: run side by side, each in a subshell
# with its own PIDS and log files, reported in order.
scenario() {  # label mode nprocs started backend must-fail pattern
  local label=$1
  shift
  (
    start_ranks "$1" "$2" "$3" "$4"
    expect_named "$1" "$4" "$5" "$6"
    # The ranks past those that must fail (the one that stopped communicating, the one that
    # died) are still unreaped children: killing their pids cannot hit a stranger.
    for ((r = $5; r < $3; r++)); do kill "${PIDS[$r]}" 2>/dev/null; wait "${PIDS[$r]}" 2>/dev/null; done
  ) > "$WORK/scenario.$label" 2>&1 &
}
scenario 1 arrive 4 3 auto 3 "rank 3 of 4 did not arrive within"
scenario 2 behind 4 4 shm 3 "Behind: rank 3 had finished at least #[0-9]+ \(allreduce\)"
scenario 3 die 3 3 shm 2 "rank 2"
scenario 4 behind 4 4 gloo 3 "Behind: rank 3 had finished at least #[0-9]+ \(allreduce\)"
scenario 5 die 3 3 gloo 2 "rank 2"
wait
for label in 1 2 3 4 5; do
  cat "$WORK/scenario.$label"
  grep -q "^FAIL" "$WORK/scenario.$label" && FAILED=1
done

# Only this test's session: meson starts each test in its own, and comm_mpi runs comm_check too.
leftover=$(pgrep -s 0 -x comm_check | tr '\n' ' ')
if [ -n "$leftover" ]; then
  fail "processes left behind: $(ps -o pid=,ppid=,etime=,args= -p "$(echo $leftover | tr " " ,)" | tr '\n' ';')"
  pkill -9 -s 0 -x comm_check
fi
ls /dev/shm | grep -q dscpp && fail "shared-memory segments left in /dev/shm: $(ls /dev/shm | grep dscpp | tr '\n' ' ')"
exit $FAILED
