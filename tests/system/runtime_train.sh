#!/usr/bin/env bash
# dscpp-runtime end to end (stage 0) with the real launcher, the mlp example on a slice of
# Fashion-MNIST, and checkpoints compared tensor by tensor:
#  1. data parallelism: 2 and 3 ranks reproduce 1 rank with the same global batch and data
#     order, and 4 accumulated micro-batches reproduce one 4× larger batch (tolerance below);
#  2. exact resume: 10 steps straight == 5 + save + load + 5, bit for bit (1 and 2 ranks);
#  3. a save that dies after writing but before committing leaves the previous checkpoint
#     as `latest`, loadable, and the next save cleans the debris;
#  4. bad plugins: no entry point, another ABI version, a failing forward → clear errors;
#  5. checkpoint/model mismatch is named; --max_restarts: a rank SIGKILLed mid-training, the
#     job restarts from the newest checkpoint and ends with the uninterrupted run's weights.
# Usage: runtime_train.sh DSCPP RUNTIME MLP_SO COMPARE BAD1_SO BAD2_SO BAD3_SO
set -u
DSCPP=$1 RUNTIME=$2 MLP=$3 COMPARE=$4 BAD1=$5 BAD2=$6 BAD3=$7
. "$(dirname "$0")/mlp_train.sh"  # skip without the data, WORK, fail/pass, port, train
MLP_ARGS=(-- --limit 1536 --hidden 64,32)

# config MICRO GAS FILE: AdamW with weight decay and a warmup schedule, clipping on.
config() {
  cat > "$3" <<JSON
{"train_micro_batch_size_per_gpu": $1, "gradient_accumulation_steps": $2, "steps_per_print": 5,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_type": "linear"}}}
JSON
}
model() { echo "$1/global_step$2/model.safetensors"; }

# ---- 1. N ranks == 1 rank; accumulation == bigger batch ----------------------------------
config 12 1 "$WORK/c12.json"; config 6 1 "$WORK/c6.json"; config 4 1 "$WORK/c4.json"; config 3 4 "$WORK/c3x4.json"
train 1 "$WORK/c12.json" "$WORK/r1.log" --steps 20 --save_dir "$WORK/r1" || fail "1-rank run: $(tail -3 "$WORK/r1.log")"
train 2 "$WORK/c6.json" "$WORK/r2.log" --steps 20 --save_dir "$WORK/r2" || fail "2-rank run: $(tail -3 "$WORK/r2.log")"
train 3 "$WORK/c4.json" "$WORK/r3.log" --steps 20 --save_dir "$WORK/r3" || fail "3-rank run: $(tail -3 "$WORK/r3.log")"
train 1 "$WORK/c3x4.json" "$WORK/g4.log" --steps 20 --save_dir "$WORK/g4" || fail "GAS-4 run: $(tail -3 "$WORK/g4.log")"
# Tolerance: the runs differ only in fp32 summation order (per-rank means averaged vs one
# mean, GEMM blocking over 3/4/6/12 rows), ~1e-7 relative per gradient, and Adam turns a
# relative gradient error into an update error of the same relative size times lr (2e-3).
# Measured after 20 steps: max |Δw| 1.2e-7 (2 ranks), 1.7e-7 (3 ranks), 2e-8 (GAS 4).
# atol 2e-6 leaves 10× headroom and is 10^4× below the control below (a different global
# batch: 3e-2).
for r in r2 r3 g4; do
  out=$("$COMPARE" "$(model "$WORK/r1" 20)" "$(model "$WORK/$r" 20)" --atol 2e-6 2>&1) && pass "$r vs 1 rank: $out" ||
    fail "$r differs from the 1-rank run: $out"
done
# A control that must fail: a different global batch (12 vs 6 per step) is far outside.
config 6 1 "$WORK/c6b.json"
train 1 "$WORK/c6b.json" "$WORK/r1b.log" --steps 20 --save_dir "$WORK/r1b" || fail "control run"
"$COMPARE" "$(model "$WORK/r1" 20)" "$(model "$WORK/r1b" 20)" --atol 2e-6 > "$WORK/ctl.txt" 2>&1 &&
  fail "control: a different batch compares equal — the tolerance is too loose: $(cat "$WORK/ctl.txt")" ||
  pass "control (different batch) is outside the tolerance: $(tail -1 "$WORK/ctl.txt")"

# ---- 2. exact resume --------------------------------------------------------------------
for ranks in 1 2; do
  c=$WORK/c12.json; [ "$ranks" = 2 ] && c=$WORK/c6.json
  train "$ranks" "$c" "$WORK/s$ranks.log" --steps 10 --save_dir "$WORK/straight$ranks" || fail "straight $ranks"
  train "$ranks" "$c" "$WORK/h$ranks.log" --steps 5 --save_dir "$WORK/halves$ranks" || fail "first half $ranks"
  train "$ranks" "$c" "$WORK/h$ranks.2.log" --steps 10 --load_dir "$WORK/halves$ranks" --save_dir "$WORK/halves$ranks" ||
    fail "second half $ranks: $(tail -3 "$WORK/h$ranks.2.log")"
  grep -q "resumed from .*global_step5 at step 5" "$WORK/h$ranks.2.log" || fail "resume $ranks: no 'resumed from' line"
  for f in model optimizer; do
    out=$("$COMPARE" "$WORK/straight$ranks/global_step10/$f.safetensors" "$WORK/halves$ranks/global_step10/$f.safetensors" 2>&1) &&
      pass "resume on $ranks rank(s), $f: bit for bit ($out)" || fail "resume on $ranks rank(s), $f differs: $out"
  done
done

# ---- 3. a save interrupted before its commit ----------------------------------------------
S=$WORK/interrupted
train 1 "$WORK/c12.json" "$WORK/i1.log" --steps 3 --save_dir "$S" || fail "interrupted: first save"
DSCPP_FAULT_INJECT=save_before_commit train 1 "$WORK/c12.json" "$WORK/i2.log" --steps 6 --load_dir "$S" --save_dir "$S"
rc=$?
[ "$rc" = 17 ] || fail "interrupted: the injected death should exit 17, got $rc"
[ "$(cat "$S/latest")" = global_step3 ] && pass "interrupted save: latest still names global_step3" ||
  fail "interrupted save: latest is '$(cat "$S/latest")'"
[ ! -e "$S/global_step6" ] || fail "interrupted save: global_step6 is visible"
ls -A "$S" | grep -q partial && pass "interrupted save: its staging directory is left behind, not visible as a tag" ||
  fail "interrupted save: no staging debris found (was the save really interrupted?) $(ls -A "$S")"
train 1 "$WORK/c12.json" "$WORK/i3.log" --steps 6 --load_dir "$S" --save_dir "$S" ||
  fail "interrupted: resume after the crash: $(tail -3 "$WORK/i3.log")"
grep -q "resumed from .*global_step3" "$WORK/i3.log" || fail "interrupted: did not resume from global_step3"
ls -A "$S" | grep -q partial && fail "interrupted: staging debris still there after the next save" ||
  pass "interrupted: next save committed global_step6 and removed the debris"
"$COMPARE" "$(model "$S" 6)" "$WORK/straight1/global_step10/model.safetensors" > /dev/null 2>&1 &&
  fail "interrupted: step 6 should differ from step 10"

# ---- 4. bad plugins ---------------------------------------------------------------------
expect_error() {  # SO PATTERN WHAT
  "$RUNTIME" --model "$1" --deepspeed_config "$WORK/c12.json" --steps 1 > "$WORK/bad.log" 2>&1
  local rc=$?
  if [ "$rc" != 0 ] && grep -qE "$2" "$WORK/bad.log"; then pass "$3: $(grep -E "$2" "$WORK/bad.log" | head -1)"; else
    fail "$3: exit $rc, expected /$2/ in: $(cat "$WORK/bad.log")"; fi
}
expect_error "$BAD1" "is not a dscpp model plugin: it does not export .dscpp_model_entry" "no entry point"
ABI=$(sed -n 's/^#define DSCPP_MODEL_ABI_VERSION \([0-9]*\)u.*/\1/p' "$(dirname "$0")/../../include/dscpp/model.h")
expect_error "$BAD2" "built for dscpp model ABI version 999, but this runtime implements version $ABI" "wrong ABI"
expect_error "$BAD3" "forward of layer 'broken' failed \(invalid argument, code 1\): matrix shapes disagree: 4 vs 5" \
  "failing forward"
# A checkpoint from another model shape is refused with the parameter named.
"$RUNTIME" --model "$MLP" --deepspeed_config "$WORK/c12.json" --steps 6 --load_dir "$S" --no_eval -- --limit 1536 \
  --hidden 48,32 > "$WORK/mismatch.log" 2>&1
grep -q "parameter 'fc1.weight' has shape \[64, 784\] in it, the model declares \[48, 784\]" "$WORK/mismatch.log" &&
  pass "mismatched checkpoint: $(grep -o "parameter 'fc1.weight'[^;]*" "$WORK/mismatch.log" | head -1)" ||
  fail "mismatched checkpoint: $(tail -2 "$WORK/mismatch.log")"

# ---- 5. restart after a rank is killed ------------------------------------------------------
R=$WORK/restart
"$DSCPP" --num_procs 2 --master_port "$(port)" --max_restarts 1 "$MLP" --deepspeed_config "$WORK/c6.json" --no_eval \
  --steps 60 --save_dir "$R" --save_interval 3 "${MLP_ARGS[@]}" > "$WORK/restart.log" 2>&1 &
job=$!
killed=""
for _ in $(seq 1 400); do
  if [ -f "$R/latest" ] && [ "$(sed 's/global_step//' "$R/latest")" -ge 6 ] 2>/dev/null; then
    pid=$(pgrep -f "dscpp-runtime.*--save_dir $R" | while read -r p; do
      grep -qz '^RANK=1$' "/proc/$p/environ" 2>/dev/null && echo "$p"; done | head -1)
    if [ -n "$pid" ]; then kill -9 "$pid" && killed=$pid; break; fi
  fi
  sleep 0.05
done
wait "$job"
rc=$?
[ -n "$killed" ] || fail "restart: never found rank 1 to kill"
[ "$rc" = 0 ] || fail "restart: the job exited $rc: $(tail -5 "$WORK/restart.log")"
grep -q "restarting the job (restart 1 of 1)" "$WORK/restart.log" || fail "restart: no restart line"
grep -q "resuming from the newest checkpoint" "$WORK/restart.log" && pass "restart: rank 1 killed, job restarted and resumed" ||
  fail "restart: no resume line: $(grep -i -E 'restart|resum' "$WORK/restart.log" | head -5)"
train 2 "$WORK/c6.json" "$WORK/straight60.log" --steps 60 --save_dir "$WORK/straight60" || fail "restart: straight run"
out=$("$COMPARE" "$(model "$R" 60)" "$(model "$WORK/straight60" 60)" 2>&1) &&
  pass "restart: final weights equal the uninterrupted run bit for bit ($out)" || fail "restart: final weights differ: $out"

exit $FAILED
