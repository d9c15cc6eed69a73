#!/usr/bin/env bash
# comms_logger on a 2-rank gpt at stage 2: rank 0 prints the summary table at the end; its
# operation count equals the communicator's own count of the run (prof_all); prof_ops limits the
# table to the kinds named (DeepSpeed's names); verbose logs each operation; a wrong name in
# prof_ops fails naming the key and the accepted names.
# Usage: comms_logger.sh DSCPP GPT_SO
set -u
DSCPP=$1 GPT=$2
WORK=$(mktemp -d /tmp/dscpp_comms_logger.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
config() {  # FILE COMMS_LOGGER_BLOCK
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 100, "comms_logger": $2,
 "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}
JSON
}
train() {  # CONFIG LOG
  "$DSCPP" --num_procs 2 --master_port "$(port)" "$GPT" --deepspeed_config "$1" --steps 2 --no_eval \
    -- --layers 2 --d_model 32 --heads 2 --context 16 --sample_chars 0 > "$2" 2>&1
}

config "$WORK/all.json" '{"enabled": true}'
train "$WORK/all.json" "$WORK/all.log" || fail "run: $(tail -3 "$WORK/all.log")"
logged=$(sed -n 's/.*total: \([0-9]*\) operations.*/\1/p' "$WORK/all.log")
counted=$(sed -n 's/.*communication (rank 0, whole run): \([0-9]*\) collectives.*/\1/p' "$WORK/all.log")
[ -n "$logged" ] && [ "$logged" = "$counted" ] && pass "summary: $logged operations, the communicator counted $counted" ||
  fail "summary counts $logged operations, the communicator $counted"
grep -q "reduce_scatter " "$WORK/all.log" && grep -q "allgather " "$WORK/all.log" &&
  pass "stage 2's reduce_scatter and allgather rows: $(grep -m1 '^.*reduce_scatter  ' "$WORK/all.log" | sed 's/.*reduce_scatter/reduce_scatter/')" ||
  fail "no reduce_scatter/allgather rows: $(grep -A6 'communication summary' "$WORK/all.log")"

config "$WORK/only.json" '{"enabled": true, "prof_all": false, "prof_ops": ["all_gather_into_tensor"], "verbose": true}'
train "$WORK/only.json" "$WORK/only.log" || fail "prof_ops run: $(tail -3 "$WORK/only.log")"
rows=$(sed -n '/communication summary/,/^.*total:/p' "$WORK/only.log" | grep -c -E '(allreduce|reduce_scatter|broadcast|barrier) ')
[ "$rows" = 0 ] && grep -q "allgather " "$WORK/only.log" && pass "prof_ops [all_gather_into_tensor]: allgather rows only" ||
  fail "prof_ops: other kinds in the table: $(sed -n '/communication summary/,/total:/p' "$WORK/only.log")"
grep -q "comm op: allgather | time (ms):" "$WORK/only.log" && pass "verbose: $(grep -m1 'comm op:' "$WORK/only.log" | sed 's/.*comm op/comm op/')" ||
  fail "verbose: no per-operation lines"

config "$WORK/bad.json" '{"enabled": true, "prof_ops": ["all_reduce_coalesced"]}'
if train "$WORK/bad.json" "$WORK/bad.log"; then
  fail "an unknown prof_ops name was accepted"
else
  grep -q 'comms_logger.prof_ops: expected operation names from .*all_reduce.*found "all_reduce_coalesced"' "$WORK/bad.log" &&
    pass "bad prof_ops: $(grep -m1 'expected operation names' "$WORK/bad.log" | cut -c1-240)" ||
    fail "bad prof_ops: no clear message: $(tail -3 "$WORK/bad.log")"
fi
[ "$FAILED" = 0 ] && echo "comms_logger: all checks passed"
exit "$FAILED"
