#!/usr/bin/env bash
# The resume options DeepSpeed's load_checkpoint has (the mlp example on 16 Fashion-MNIST samples,
# in order, so every 2 steps of 8 start the data over): --load_tag picks a checkpoint other than
# `latest`; --no_load_optimizer_states continues the counters and schedule with a fresh Adam, so
# its first step is exactly the first step of a run that starts from the saved weights (with
# bf16, from those weights rounded to bf16, as DeepSpeed rebuilds its master from the module);
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

# ---- --no_load_optimizer_states with bf16: the master comes back rounded --------------------
# DeepSpeed has no fp32 master to read without the optimizer state, so it rebuilds it from the
# bf16 module weights: the resumed run must train exactly as a fresh one from the checkpoint's
# master rounded to bf16 (round to nearest, ties to even, as torch's .to(torch.bfloat16) does).
# Two more steps, so the second batch and a second Adam step are covered too.
config "$WORK/bf.json" 8
sed -i 's/^{/{"bf16": {"enabled": true}, /' "$WORK/bf.json"
# bf16_round IN OUT: the fp32 file with every value rounded to bf16 (still stored as fp32).
bf16_round() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
from array import array
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
assert all(t["dtype"] == "F32" for k, t in header.items() if k != "__metadata__"), "not all fp32"
data = array("I", raw[8 + n:])
assert sys.byteorder == "little"
for i, u in enumerate(data):
    if (u & 0x7F800000) != 0x7F800000:  # inf and NaN stay as they are
        u += 0x7FFF + ((u >> 16) & 1)
    data[i] = u & 0xFFFF0000
open(sys.argv[2], "wb").write(raw[:8 + n] + data.tobytes())
PY
}
B=$WORK/bs
run "$WORK/bf.json" "$WORK/bs.log" --steps 2 --save_dir "$B" || fail "bf16 save: $(tail -3 "$WORK/bs.log")"
run "$WORK/bf.json" "$WORK/bo.log" --steps 4 --load_dir "$B" --no_load_optimizer_states --save_dir "$WORK/bo" ||
  fail "bf16 --no_load_optimizer_states: $(tail -3 "$WORK/bo.log")"
bf16_round "$B/global_step2/model.safetensors" "$WORK/rounded.safetensors" || fail "rounding the bf16 master"
run "$WORK/bf.json" "$WORK/br.log" --steps 2 --init_from "$WORK/rounded.safetensors" --save_dir "$WORK/br" ||
  fail "bf16 from the rounded weights: $(tail -3 "$WORK/br.log")"
run "$WORK/bf.json" "$WORK/bu.log" --steps 2 --init_from "$B/global_step2/model.safetensors" --save_dir "$WORK/bu" ||
  fail "bf16 from the saved fp32 master: $(tail -3 "$WORK/bu.log")"
BO=$WORK/bo/global_step4 BR=$WORK/br/global_step2
grep -q "the fp32 master from the bf16 weights" "$WORK/bo.log" && same "$BO" "$BR" &&
  "$COMPARE" "$BO/optimizer.safetensors" "$BR/optimizer.safetensors" > /dev/null 2>&1 &&
  [ "$(key "$BO" optimizer.step)" = 2 ] && [ "$(key "$BO" global_samples)" = 32 ] &&
  pass "bf16 --no_load_optimizer_states: steps 3-4 = a fresh optimizer's 2 steps from the step-2 master rounded to bf16" ||
  fail "bf16 --no_load_optimizer_states: weights or Adam state differ from a fresh run from the rounded master" \
    "(largest difference: $("$COMPARE" "$BO/model.safetensors" "$BR/model.safetensors" 2>&1 | tail -1)), or counters" \
    "$(key "$BO" optimizer.step)/$(key "$BO" global_samples)"
same "$BO" "$WORK/bu/global_step2" &&
  fail "bf16: a fresh run from the unrounded fp32 master gives the same weights: the check above proves nothing" ||
  pass "bf16: a fresh run from the unrounded fp32 master differs from it (the rounding shows in the result)"

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
