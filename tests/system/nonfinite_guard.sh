#!/usr/bin/env bash
# NaN and inf never reach the weights or a checkpoint (the mlp example on a slice of
# Fashion-MNIST, fault injection through DSCPP_INJECT_NAN):
#  1. one NaN in one rank's gradients (fp32, 2 ranks, stage 2) or one NaN loss (bf16): the step
#     is skipped with a warning naming it, training goes on and ends normally;
#  2. NaN gradients from some step on: the run stops after DSCPP_MAX_NONFINITE_STEPS steps in a
#     row with an error naming the step, and `latest` still names the last good checkpoint,
#     which loads (fp32 stage 2 and bf16 stage 0);
#  3. a NaN the step guard cannot see (written into a master weight after the update): the save
#     is refused, nothing is committed, and `latest` is unchanged (1 rank stage 0, 2 ranks stage 1);
#  4. a malformed DSCPP_MAX_NONFINITE_STEPS is named at start.
# Usage: nonfinite_guard.sh DSCPP RUNTIME MLP_SO
set -u
DSCPP=$1 RUNTIME=$2 MLP=$3
. "$(dirname "$0")/mlp_train.sh"  # skip without the data, WORK, fail/pass, port, train
MLP_ARGS=(-- --limit 768 --hidden 32)

# config STAGE PRECISION FILE: AdamW, clipping on, bf16 or fp32.
config() {
  local prec=""
  [ "$2" = bf16 ] && prec='"bf16": {"enabled": true},'
  cat > "$3" <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 2, $prec
 "zero_optimization": {"stage": $1}, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}}
JSON
}
config 2 fp32 "$WORK/s2.json"; config 0 bf16 "$WORK/bf16.json"; config 0 fp32 "$WORK/s0.json"
config 1 fp32 "$WORK/s1.json"

# ---- 1. one bad step is skipped, the run goes on ----------------------------------------
DSCPP_INJECT_NAN=grads:4 train 2 "$WORK/s2.json" "$WORK/one.log" --steps 8 ||
  fail "one NaN step: the run failed: $(tail -3 "$WORK/one.log")"
grep -q "step 4: non-finite gradients (global norm nan); the step is skipped" "$WORK/one.log" &&
  pass "fp32 stage 2: a NaN in one rank's gradients skips step 4 with a warning" ||
  fail "fp32 stage 2: no skip warning for step 4: $(grep -i "non-finite\|error" "$WORK/one.log" | head -3)"
grep -q "step 8/8" "$WORK/one.log" && ! grep -q "loss nan" "$WORK/one.log" &&
  pass "fp32 stage 2: training reaches step 8 and no progress line shows loss nan" ||
  fail "fp32 stage 2: $(grep "step [0-9]*/8" "$WORK/one.log" | tail -2)"
DSCPP_INJECT_NAN=loss:3 train 1 "$WORK/bf16.json" "$WORK/loss.log" --steps 6 ||
  fail "NaN loss: the run failed: $(tail -3 "$WORK/loss.log")"
grep -q "step 3: non-finite loss; the step is skipped" "$WORK/loss.log" &&
  pass "bf16: a NaN loss skips step 3 with a warning" ||
  fail "bf16: no skip warning for a NaN loss: $(grep -i "non-finite\|error" "$WORK/loss.log" | head -3)"

# ---- 2. non-finite in a row: a stop, and latest still the last good checkpoint -------------
for c in "2 s2" "1 bf16"; do
  set -- $c
  ranks=$1 name=$2 S=$WORK/stop-$2
  train "$ranks" "$WORK/$name.json" "$WORK/stop-$name-1.log" --steps 3 --save_dir "$S" ||
    fail "$name: first save: $(tail -3 "$WORK/stop-$name-1.log")"
  DSCPP_INJECT_NAN=grads:5-100 train "$ranks" "$WORK/$name.json" "$WORK/stop-$name-2.log" --steps 10 \
    --load_dir "$S" --save_dir "$S"
  rc=$?
  [ "$rc" != 0 ] && grep -q "step 7: non-finite gradients.*, 3 in a row (DSCPP_MAX_NONFINITE_STEPS=3): stopping" \
    "$WORK/stop-$name-2.log" && pass "$name: NaN gradients from step 5 stop the run at step 7 (exit $rc)" ||
    fail "$name: expected a stop at step 7, exit $rc: $(grep -i "non-finite\|error" "$WORK/stop-$name-2.log" | tail -3)"
  [ "$(cat "$S/latest")" = global_step3 ] && [ ! -e "$S/global_step7" ] && [ ! -e "$S/global_step10" ] &&
    pass "$name: latest still names global_step3" || fail "$name: latest is '$(cat "$S/latest")': $(ls "$S")"
  train "$ranks" "$WORK/$name.json" "$WORK/stop-$name-3.log" --steps 5 --load_dir "$S" ||
    fail "$name: resuming from the kept checkpoint: $(tail -3 "$WORK/stop-$name-3.log")"
done
DSCPP_MAX_NONFINITE_STEPS=1 DSCPP_INJECT_NAN=grads:2 train 1 "$WORK/s0.json" "$WORK/max1.log" --steps 4 &&
  fail "DSCPP_MAX_NONFINITE_STEPS=1: the run went on after a NaN step" ||
  { grep -q "step 2: non-finite gradients.*, 1 in a row (DSCPP_MAX_NONFINITE_STEPS=1)" "$WORK/max1.log" &&
    pass "DSCPP_MAX_NONFINITE_STEPS=1 stops at the first non-finite step" ||
    fail "DSCPP_MAX_NONFINITE_STEPS=1: $(tail -3 "$WORK/max1.log")"; }

# ---- 3. the save refuses non-finite state ------------------------------------------------
for c in "1 s0" "2 s1"; do
  set -- $c
  ranks=$1 name=$2 S=$WORK/save-$2
  train "$ranks" "$WORK/$name.json" "$WORK/save-$name-1.log" --steps 2 --save_dir "$S" ||
    fail "$name: first save: $(tail -3 "$WORK/save-$name-1.log")"
  DSCPP_INJECT_NAN=weights:4 train "$ranks" "$WORK/$name.json" "$WORK/save-$name-2.log" --steps 4 --load_dir "$S" \
    --save_dir "$S"
  rc=$?
  [ "$rc" != 0 ] && grep -q "refusing to commit checkpoint global_step4: 1 NaN/inf values" "$WORK/save-$name-2.log" &&
    grep -qE "the first in (fp32|fc1.weight) element 0" "$WORK/save-$name-2.log" &&
    pass "$name ($ranks rank(s)): a NaN master weight is refused at save, naming the tensor and element" ||
    fail "$name: expected the save refused, exit $rc: $(grep -i "nan\|error" "$WORK/save-$name-2.log" | tail -3)"
  [ "$(cat "$S/latest")" = global_step2 ] && [ ! -e "$S/global_step4" ] &&
    pass "$name: latest still names global_step2" || fail "$name: latest is '$(cat "$S/latest")': $(ls "$S")"
done

# ---- 4. a malformed limit ----------------------------------------------------------------
DSCPP_MAX_NONFINITE_STEPS=0 train 1 "$WORK/s0.json" "$WORK/bad.log" --steps 1 &&
  fail "DSCPP_MAX_NONFINITE_STEPS=0 was accepted" ||
  { grep -q "DSCPP_MAX_NONFINITE_STEPS='0': expected a positive whole number" "$WORK/bad.log" &&
    pass "DSCPP_MAX_NONFINITE_STEPS=0 is refused, naming the variable" || fail "bad limit: $(tail -2 "$WORK/bad.log")"; }

exit $FAILED
