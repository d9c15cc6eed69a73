#!/usr/bin/env bash
# --launcher openmpi: ranks start through a real mpirun, each with dscpp's rank environment
# (mapped from OMPI_COMM_WORLD_* by the rank shim) and the forwarded variables; a failing
# rank ends the job with its own code (not mpirun's) and is named, with no rank left behind:
# exit 4, SIGKILL (137), and a rank failing on its own after another exited 3 "because a peer
# failed" (which mpirun's own abort would have hidden).
#   launch_openmpi.sh DSCPP
set -u
dscpp=$(readlink -f "$1")
command -v mpirun >/dev/null || { echo "mpirun not installed"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$dscpp" --launcher openmpi --num_procs 4 --env FOO='a b' -- \
  sh -c 'echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_SIZE=$LOCAL_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT FOO=$FOO"' \
  >"$tmp/out" 2>"$tmp/err" || fail "4 ranks through mpirun failed: $(cat "$tmp/err")"
for r in 0 1 2 3; do
  grep -qx "\[rank $r\] RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 LOCAL_SIZE=4 MASTER=127.0.0.1:29500 FOO=a b" "$tmp/out" ||
    fail "rank $r line missing: $(cat "$tmp/out")"
done

token=dscpp-mpi-$$
start=$SECONDS
"$dscpp" --launcher openmpi --num_procs 3 -- sh -c "if [ \$RANK = 1 ]; then exit 4; fi; exec sleep 60 # $token" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 4 ] || fail "a rank exiting 4 made dscpp exit $rc, expected 4"
grep -q "rank 1 on .* exited with code 4" "$tmp/err" || fail "rank 1's failure not named: $(cat "$tmp/err")"
[ $((SECONDS - start)) -lt 20 ] || fail "took $((SECONDS - start)) s to stop"
sleep 0.5
left=$(pgrep -f "$token" | grep -v "^$$\$" || true)
[ -z "$left" ] || fail "processes left after the failure: $left"

# expect NAME CODE PATTERN PROGRAM...: dscpp (3 ranks through mpirun) exits CODE within 20 s,
# names the failure with a line matching PATTERN, and leaves nothing behind.
expect() {
  local name=$1 code=$2 pattern=$3 rc start=$SECONDS
  shift 3
  "$dscpp" --launcher openmpi --num_procs 3 -- "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s: $(grep "^dscpp:" "$tmp/$name.err" | head -1)"
  [ "$rc" = "$code" ] || fail "$name: dscpp exited $rc, expected $code: $(cat "$tmp/$name.err")"
  grep -qE "^dscpp: $pattern" "$tmp/$name.err" || fail "$name: no line matching '$pattern': $(cat "$tmp/$name.err")"
  [ $((SECONDS - start)) -lt 20 ] || fail "$name: took $((SECONDS - start)) s"
  sleep 0.5
  left=$(pgrep -f "$token" | grep -v "^$$\$" || true)
  [ -z "$left" ] || fail "$name: processes left: $left"
}
expect kill9 137 "rank 2 on \S+ killed by signal KILL; stopping the other ranks$" \
  sh -c "if [ \$RANK = 2 ]; then sleep 0.3; kill -9 \$\$; fi; exec sleep 60 # $token"
expect bystander 1 "rank 2 on \S+ exited with code 1 \(rank 0 had stopped because of a peer's failure\)" \
  sh -c "case \$RANK in 0) sleep 0.3; exit 3;; 2) sleep 1.3; exit 1;; esac; exec sleep 60 # $token"

[ "$failures" = 0 ] && echo "launch_openmpi: all checks passed"
exit $(( failures > 0 ))
