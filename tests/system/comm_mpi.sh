#!/usr/bin/env bash
# The mpi backend under a real mpirun on 2, 3 and 4 ranks (3 and 4 oversubscribe the cores,
# which also shakes out ordering assumptions): every operation and dtype against a serial
# reference, the chunked paths for counts beyond INT_MAX, sub-groups and error messages.
#   comm_mpi.sh MPI_BACKEND_CHECK   (COMM_MPI_RUN_TIMEOUT: seconds per run, default 100;
#   a normal build needs ~5-15 s per run, ASan+UBSan ~25-50 s on a busy 2-core machine)
set -u
check=$(readlink -f "$1")
command -v mpirun >/dev/null || { echo "mpirun not installed: skipping the mpi backend test"; exit 77; }
# Under the sanitizer build, OpenMPI's own allocations (MCA components it unloads at finalize,
# so unsymbolisable and unsuppressible by name) would be reported as leaks of our program.
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
# Under the sanitizers (memory errors, not numbers) one run: 3 ranks, the uneven split.
RANKS="2 3 4"
[ "${DSCPP_TEST_SANITIZED:-0}" = 1 ] && RANKS=3
for n in $RANKS; do
  start=$SECONDS
  if timeout "${COMM_MPI_RUN_TIMEOUT:-100}" mpirun --allow-run-as-root --oversubscribe -np "$n" "$check" >"$tmp/out" 2>"$tmp/err"; then
    echo "np=$n ($((SECONDS - start)) s): $(cat "$tmp/out")"
  else
    rc=$? note=""
    [ "$rc" = 124 ] && note=" (timed out)"
    echo "FAIL: np=$n exited $rc after $((SECONDS - start)) s$note"
    grep -v '^\s*$' "$tmp/err" | head -20
    failures=$((failures + 1))
  fi
done
[ "$failures" = 0 ] && echo "comm_mpi: all runs passed"
exit $(( failures > 0 ))
