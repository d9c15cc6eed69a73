#!/usr/bin/env bash
# Launch-to-all-ranks-running time on this machine: `dscpp --num_procs N` against
# `mpirun -np N` starting the same trivial program in the same run (best of 7 each).
# The program records when it started; the time is from just before the launcher starts
# to the last rank's start, so exit and teardown are not counted.
#   bench_launch.sh [DSCPP]
set -u
dscpp=${1:-$(dirname "$0")/../build/launcher/dscpp}
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/stamp.sh" <<'EOS'
#!/bin/sh
date +%s%N >> "$STAMP_FILE"
EOS
chmod +x "$tmp/stamp.sh"
export STAMP_FILE=$tmp/stamps

# best_of CMD...: smallest launch-to-last-start latency in ms over 7 runs.
best_of() {
  local best=999999 i start last ms
  for i in 1 2 3 4 5 6 7; do
    : >"$STAMP_FILE"
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "FAILED: $*" >&2; return 1; }
    last=$(sort -n "$STAMP_FILE" | tail -1)
    ms=$(( (last - start) / 1000000 ))
    [ "$ms" -lt "$best" ] && best=$ms
  done
  echo "$best"
}

as_root=""; [ "$(id -u)" = 0 ] && as_root=--allow-run-as-root
printf '%-6s %12s %12s %8s\n' ranks "dscpp ms" "mpirun ms" ratio
for n in 1 4 16; do
  d=$(best_of "$dscpp" --num_procs "$n" -- "$tmp/stamp.sh") || exit 1
  m=$(best_of mpirun $as_root --oversubscribe -np "$n" "$tmp/stamp.sh") || exit 1
  printf '%-6s %12s %12s %7.2fx\n' "$n" "$d" "$m" "$(awk -v d="$d" -v m="$m" 'BEGIN { print d / (m > 0 ? m : 1) }')"
done
echo "(ratio = dscpp / mpirun; below 1 means dscpp is faster)"
