#!/usr/bin/env bash
# The resume options DeepSpeed's load_checkpoint has (the mlp example on 16 Fashion-MNIST samples,
# in order, so every 2 steps of 8 start the data over): --load_tag picks a checkpoint other than
# `latest`; --no_load_optimizer_states continues the counters and schedule with a fresh Adam, so
# its first step is exactly the first step of a run that starts from the saved weights;
# --load_module_only restarts the step counter and LR schedule, so it trains exactly as a run
# from those weights with --init_from; --no_load_lr_scheduler_states restarts the schedule only;
# another train_batch_size is accepted and named. Every comparison is bit-for-bit, and the
# default resume is checked to differ where the options must make a difference.
# Usage: resume_options.sh DSCPP RUNTIME MLP_SO COMPARE_SAFETENSORS
set -u
DSCPP=$1 RUNTIME=$2 MLP=$3 COMPARE=$4
. "$(dirname "$0")/mlp_train.sh"  # skip without the data, WORK, fail/pass, port, train
MLP_ARGS=(-- --limit 16 --hidden 32)

config() {  # config FILE MICRO [SCHEDULER]
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}${3:+, \"scheduler\": $3}}
JSON
}
# key TAG_DIR DOTTED.KEY: a value from the checkpoint's manifest.
key() {
  /usr/bin/python3 - "$1/manifest.json" "$2" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v = v[k]
print(v)
PY
}
same() { "$COMPARE" "$1/model.safetensors" "$2/model.safetensors" > /dev/null 2>&1; }
run() { train 1 "$@" --no_shuffle; }
config "$WORK/c.json" 8
config "$WORK/w.json" 8 '{"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 10, "warmup_type": "linear"}}'
config "$WORK/b4.json" 4

S=$WORK/s
run "$WORK/c.json" "$WORK/s.log" --steps 4 --save_dir "$S" --save_interval 2 || fail "save: $(tail -3 "$WORK/s.log")"

# ---- --load_tag, and the default resume (what the other options are measured against) -------
run "$WORK/c.json" "$WORK/d.log" --steps 3 --load_dir "$S" --load_tag global_step2 --save_dir "$WORK/d" &&
  grep -q "resumed from .*global_step2 at step 2" "$WORK/d.log" && [ "$(key "$WORK/d/global_step3" optimizer.step)" = 3 ] &&
  pass "--load_tag global_step2 (latest: $(cat "$S/latest")): resumed at step 2, Adam at step 3" ||
  fail "--load_tag: $(grep -i "resumed\|error" "$WORK/d.log" | tail -2)"
run "$WORK/c.json" "$WORK/t.log" --steps 3 --load_dir "$S" --load_tag global_step9 &&
  fail "--load_tag global_step9 was accepted" ||
  { grep -q "\-\-load_tag global_step9: .* is not a checkpoint directory; .* holds global_step2, global_step4" "$WORK/t.log" &&
    pass "--load_tag of a missing tag: refused, naming the tags there" || fail "missing tag: $(tail -2 "$WORK/t.log")"; }

# ---- --no_load_optimizer_states: fresh Adam over the saved weights --------------------------
run "$WORK/c.json" "$WORK/f.log" --steps 1 --init_from "$S/global_step2/model.safetensors" --save_dir "$WORK/f" ||
  fail "fresh run: $(tail -3 "$WORK/f.log")"
run "$WORK/c.json" "$WORK/o.log" --steps 3 --load_dir "$S" --load_tag global_step2 --no_load_optimizer_states \
  --save_dir "$WORK/o" || fail "--no_load_optimizer_states: $(tail -3 "$WORK/o.log")"
O=$WORK/o/global_step3 F=$WORK/f/global_step1
same "$O" "$F" && "$COMPARE" "$O/optimizer.safetensors" "$F/optimizer.safetensors" > /dev/null 2>&1 &&
  [ "$(key "$O" optimizer.step)" = 1 ] && [ "$(key "$O" global_samples)" = 24 ] &&
  pass "--no_load_optimizer_states: step 3 = a fresh optimizer's first step from the step-2 weights (Adam step 1, samples 24)" ||
  fail "--no_load_optimizer_states: weights or Adam state differ from a fresh optimizer's, or counters $(key "$O" optimizer.step)/$(key "$O" global_samples)"
same "$WORK/d/global_step3" "$F" && fail "the default resume equals a fresh optimizer's step: the check above proves nothing" ||
  pass "the default resume differs from it (the saved Adam state was used)"

# ---- --load_module_only and --no_load_lr_scheduler_states: the warm-up starts over ----------
W=$WORK/w
run "$WORK/w.json" "$WORK/w.log" --steps 2 --save_dir "$W" || fail "warm-up save: $(tail -3 "$WORK/w.log")"
run "$WORK/w.json" "$WORK/wi.log" --steps 2 --init_from "$W/global_step2/model.safetensors" --save_dir "$WORK/wi" ||
  fail "warm-up from weights: $(tail -3 "$WORK/wi.log")"
run "$WORK/w.json" "$WORK/m.log" --steps 2 --load_dir "$W" --load_module_only --save_dir "$WORK/m" ||
  fail "--load_module_only: $(tail -3 "$WORK/m.log")"
M=$WORK/m/global_step2
grep -q "resumed from .*global_step2 at step 0 (0 samples seen)" "$WORK/m.log" && same "$M" "$WORK/wi/global_step2" &&
  [ "$(key "$M" lr_scheduler.last_batch_iteration)" = "$(key "$W/global_step2" lr_scheduler.last_batch_iteration)" ] &&
  ! same "$M" "$W/global_step2" &&
  pass "--load_module_only: step 0, LR warm-up from its start: 2 steps equal --init_from's 2 steps" ||
  fail "--load_module_only: $(grep "resumed" "$WORK/m.log"); not the run from the weights"
run "$WORK/w.json" "$WORK/l.log" --steps 3 --load_dir "$W" --no_load_lr_scheduler_states --save_dir "$WORK/l" ||
  fail "--no_load_lr_scheduler_states: $(tail -3 "$WORK/l.log")"
first=$(($(key "$W/global_step2" lr_scheduler.last_batch_iteration) - 1))  # after one step of a fresh schedule
[ "$(key "$WORK/l/global_step3" lr_scheduler.last_batch_iteration)" = "$first" ] &&
  [ "$(key "$WORK/l/global_step3" global_steps)" = 3 ] && [ "$(key "$WORK/l/global_step3" optimizer.step)" = 3 ] &&
  pass "--no_load_lr_scheduler_states: the schedule restarted (last_batch_iteration $first) at global step 3, Adam continued" ||
  fail "--no_load_lr_scheduler_states: schedule at $(key "$WORK/l/global_step3" lr_scheduler.last_batch_iteration), want $first"

# ---- another train_batch_size: accepted, what changes is named ------------------------------
run "$WORK/b4.json" "$WORK/b.log" --steps 3 --load_dir "$S" --load_tag global_step2 --save_dir "$WORK/b" &&
  grep -q "was trained with train_batch_size 8 (micro 8 x accumulation 1 x 1 ranks), this run has 4 (micro 4 .*accepted" "$WORK/b.log" &&
  [ "$(key "$WORK/b/global_step3" global_samples)" = 20 ] &&
  pass "train_batch_size 8 -> 4: resumed at step 2, named, 20 samples after one more step" ||
  fail "train_batch_size 8 -> 4: $(grep -i "train_batch_size\|error" "$WORK/b.log" | tail -2)"
exit $FAILED
