#!/usr/bin/env bash
# `dscpp estimate` as a user runs it: DeepSpeed's table for given counts, the counts read from
# the GPT example plugin (checked against examples/README.md's layer shapes), and clear errors
# for bad inputs.
#   estimate_cli.sh DSCPP DSCPP_RUNTIME LIBGPT_SO
set -u
dscpp=$1 runtime=$2 gpt=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Counts on the command line: one row of DeepSpeed's documented ZeRO-3 example.
"$dscpp" estimate --stage 3 --total_params 2851e6 --largest_layer_params 32e6 --num_gpus_per_node 8 --num_nodes 1 \
  >"$tmp/out" 2>"$tmp/err" || fail "documented example rejected: $(cat "$tmp/err")"
grep -qx '   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1' "$tmp/out" ||
  fail "documented ZeRO-3 row missing: $(cat "$tmp/out")"
[ "$(wc -l <"$tmp/out")" = 10 ] || fail "ZeRO-3 table is not 4 header lines + 6 rows: $(cat "$tmp/out")"

# A text with a known vocabulary: the 26 letters, space and newline (V = 28).
for _ in $(seq 400); do echo "the quick brown fox jumps over the lazy dog"; done >"$tmp/text.txt"
V=28

# The GPT example's parameters (examples/README.md): embed = V·C + T·C; each block
# 2C + (3C² + 3C) + (C² + C) + 2C + (4C² + 4C) + (4C² + C) = 12C² + 13C; head = 2C + V·C.
check_gpt() {  # LAYERS C HEADS T
  local L=$1 C=$2 H=$3 T=$4
  local embed=$((V * C + T * C)) block=$((12 * C * C + 13 * C)) head=$((2 * C + V * C))
  local P=$((embed + L * block + head))
  local Lp=$embed name=embed
  [ "$block" -gt "$Lp" ] && { Lp=$block; name=blocks.0; }
  [ "$head" -gt "$Lp" ] && { Lp=$head; name=head; }
  local args=(-- --data "$tmp/text.txt" --layers "$L" --d_model "$C" --heads "$H" --context "$T")

  # What the runtime declares, straight from --describe_model.
  "$runtime" --model "$gpt" --describe_model "${args[@]}" >"$tmp/desc" 2>"$tmp/err" ||
    { fail "--describe_model failed: $(cat "$tmp/err")"; return; }
  [ "$(wc -l <"$tmp/desc")" = 1 ] || fail "--describe_model printed more than one line: $(cat "$tmp/desc")"
  grep -q "\"total_params\": $P, \"largest_layer_params\": $Lp, \"largest_layer\": \"$name\"" "$tmp/desc" ||
    fail "L=$L C=$C: expected P=$P Lp=$Lp ($name): $(cat "$tmp/desc")"
  local sum
  sum=$(grep -o '"params": [0-9]*' "$tmp/desc" | awk '{s += $2} END {print s}')
  [ "$sum" = "$P" ] || fail "L=$L C=$C: the per-layer counts sum to $sum, not $P"
  [ "$(grep -o '"params": ' "$tmp/desc" | wc -l)" = $((L + 2)) ] || fail "L=$L: expected $((L + 2)) layers"

  # dscpp estimate --model: the counts line and DeepSpeed's table for them (n = g = 1).
  "$dscpp" estimate --stage 2 --model "$gpt" "${args[@]}" >"$tmp/out" 2>"$tmp/err" ||
    { fail "estimate --model failed: $(cat "$tmp/err")"; return; }
  grep -q "^Model .*: $P total params in $((L + 2)) layers; largest layer $name with $Lp params\.$" "$tmp/out" ||
    fail "L=$L C=$C: counts line: $(head -1 "$tmp/out")"
  grep -qx "SW: Model with $(awk -v p="$P" 'BEGIN {printf "%d", p / 1e6}')M total params." "$tmp/out" ||
    fail "L=$L C=$C: SW line: $(cat "$tmp/out")"
  # ZeRO-2, no offload, one GPU: CPU P·4·1·1.5 = 6P, GPU 2P + 18P = 20P bytes, in GiB.
  local row
  row=$(awk -v p="$P" 'BEGIN {printf " %7.2fGB | %6.2fGB | offload_optimizer=none", 6 * p / 2^30, 20 * p / 2^30}')
  grep -qxF "$row" "$tmp/out" || fail "L=$L C=$C: expected row '$row' in: $(cat "$tmp/out")"

  # ZeRO-3 none/none with zero.Init, one GPU: CPU Lp·4·1·1.5 = 6·Lp, GPU 4·Lp + 18P bytes.
  "$dscpp" estimate --stage 3 --model "$gpt" "${args[@]}" >"$tmp/out" 2>"$tmp/err" ||
    { fail "estimate --stage 3 --model failed: $(cat "$tmp/err")"; return; }
  row=$(awk -v p="$P" -v l="$Lp" \
    'BEGIN {printf " %7.2fGB | %6.2fGB | offload_param=none, offload_optimizer=none, zero_init=1", 6 * l / 2^30, (4 * l + 18 * p) / 2^30}')
  grep -qxF "$row" "$tmp/out" || fail "L=$L C=$C: expected row '$row' in: $(cat "$tmp/out")"
}
check_gpt 3 64 4 16      # P = 154,688; the largest layer is a block
check_gpt 8 1024 8 256   # P ≈ 101M, so the table shows non-zero GiB
check_gpt 1 8 2 300      # tiny width, long context: the embedding is the largest layer

# Bad inputs: exit status 1 and a message naming what to fix.
expect_error() {  # PATTERN ARGS...
  local pattern=$1; shift
  "$dscpp" estimate "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  [ "$rc" != 0 ] || { fail "accepted: estimate $*"; return; }
  grep -q -- "$pattern" "$tmp/err" || fail "estimate $*: no '$pattern' in: $(cat "$tmp/err")"
}
expect_error "--stage 3 needs --largest_layer_params" --stage 3 --total_params 1e9
expect_error "--total_params must be a whole number" --stage 2 --total_params -5
expect_error "--total_params must be a whole number" --stage 2 --total_params=-5
expect_error "--largest_layer_params must be a whole number" --stage 3 --total_params 1e9 --largest_layer_params=-1
expect_error "exceeds --total_params" --stage 3 --total_params 1e6 --largest_layer_params 2e6
expect_error "--stage must be 2 or 3" --stage 1 --total_params 1e9
expect_error "--num_nodes must be at least 1" --stage 2 --total_params 1e9 --num_nodes 0
expect_error "give --total_params P" --stage 2
expect_error "used by --stage 3 only" --stage 2 --total_params 1e9 --largest_layer_params 1e6
expect_error "--additional_buffer_factor must be a positive number" --stage 2 --total_params 1e9 --additional_buffer_factor 0
expect_error "--total_params must be a whole number" --stage 2 --total_params 1.5
expect_error "either --model" --stage 3 --model "$gpt" --total_params 5
expect_error "no such file" --stage 2 --model "$tmp/missing.so"
# A plugin that rejects its arguments: its own message reaches the user.
expect_error "not a multiple of --heads" --stage 2 --model "$gpt" -- --data "$tmp/text.txt" --d_model 64 --heads 3

[ "$failures" = 0 ] && echo "estimate_cli: all checks passed"
exit $((failures > 0))
