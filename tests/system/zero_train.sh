#!/usr/bin/env bash
# ZeRO stages 1-3 end to end with the real launcher, compared through their checkpoints
# (consolidated by `dscpp zero-to-fp32`) tensor by tensor:
#  1. stages 1/2/3 on 2/3/4 ranks (GAS > 1 in three of them) reproduce stage 0 on one rank with
#     the same global batch after K steps (tolerance below, with a control that must fail);
#     a tiny gpt at stage 3 (attention, layer norms, embeddings) likewise;
#  2. exact resume, bit for bit, at stages 1, 2, 3 (fp32), stage 2 bf16 and stage 3 fp16 (with
#     overflows: the loss scaler's state continues): K steps straight == K/2 + save + load +
#     K/2, every rank file (master weights and optimizer state) and the consolidated weights;
#  3. reshard: the 4-rank stage-3 checkpoint of step K/2 continued on 2 ranks at stage 1 and on
#     1 rank at stage 0 matches the unbroken run; weights alone (fresh optimizer) do not; loaded
#     and saved again at 2 × stage 1, 3 × stage 2, 1 × stage 0 it keeps weights and moments
#     bit for bit;
#  4. --init_from at stage 3 reproduces the file exactly; zero-to-fp32 of a stage-0 checkpoint
#     is its model.safetensors; progress lines;
#  5. a save killed before its commit leaves `latest` loadable; a mismatched model or batch is
#     named;
#  6. PyPI's safetensors (numpy) opens the consolidated file and matches the 1-rank run.
# Usage: zero_train.sh DSCPP MLP_SO GPT_SO COMPARE
set -u
DSCPP=$1 MLP=$2 GPT=$3 COMPARE=$4
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "zero_train: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): skipping"
  exit 77
fi
WORK=$(mktemp -d /tmp/dscpp_zero_train.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
# Odd widths: parameters straddle rank boundaries at every world size.
MLP_ARGS=(--limit 1536 --hidden 37,23)
GPT_ARGS=(--layers 2 --d_model 32 --heads 2 --context 16 --sample_chars 0)
K=10

# config STAGE MICRO GAS FILE [DTYPE]: AdamW with weight decay, warmup, clipping. Stages 1/2
# use 20000-element buckets, so the mlp has two partition groups ([fc1], [fc2, head]).
# fp16: a small scale window, so the loss scale moves on both sides of a save.
config() {
  local half=""
  [ "${5:-fp32}" = bf16 ] && half='"bf16": {"enabled": true},'
  [ "${5:-fp32}" = fp16 ] &&
    half='"fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 3, "hysteresis": 1},'
  cat > "$4" <<JSON
{"train_micro_batch_size_per_gpu": $2, "gradient_accumulation_steps": $3, "steps_per_print": 1,
 "gradient_clipping": 1.0, $half
 "zero_optimization": {"stage": $1, "reduce_bucket_size": 20000},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_type": "linear"}}}
JSON
}
# train MODEL RANKS CONFIG LOG [runtime args...]: through the launcher.
train() {
  local model=$1 ranks=$2 cfg=$3 log=$4 args
  shift 4
  if [ "$model" = gpt ]; then args=("${GPT_ARGS[@]}"); so=$GPT; else args=("${MLP_ARGS[@]}"); so=$MLP; fi
  "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$so" --deepspeed_config "$cfg" --no_eval "$@" -- \
    "${args[@]}" > "$log" 2>&1
}
consolidate() { "$DSCPP" zero-to-fp32 "$1" "$2" -q > "$2.log" 2>&1 || fail "zero-to-fp32 $1: $(cat "$2.log")"; }
# resume_dir SRC_TAG DIR: a save dir holding only SRC_TAG, `latest` naming it.
resume_dir() { mkdir -p "$2" && cp -r "$1" "$2/" && basename "$1" > "$2/latest"; }

# ---- 1. stages 1-3 on 2-4 ranks == stage 0 on 1 rank --------------------------------------
config 0 12 1 "$WORK/ref.json"
train mlp 1 "$WORK/ref.json" "$WORK/ref.log" --steps $K --save_dir "$WORK/ref" --save_interval $((K / 2)) ||
  fail "reference run: $(tail -3 "$WORK/ref.log")"
REF=$WORK/ref/global_step$K/model.safetensors
# name STAGE RANKS MICRO GAS: global batch 12 = micro × GAS × ranks throughout.
GRID=("s1r2 1 2 6 1" "s1r3 1 3 2 2" "s1r4 1 4 3 1" "s2r2 2 2 3 2" "s2r3 2 3 4 1" "s2r4 2 4 3 1"
  "s3r2 3 2 2 3" "s3r3 3 3 4 1" "s3r4 3 4 3 1")
# Tolerance: every run computes the same sums in fp32 in a different order (per-rank means
# summed by the reduce-scatter instead of one mean, GEMMs blocked over 2-12 rows, GAS
# windows), ~1e-7 relative per gradient; Adam turns that into update differences of the same
# relative size times lr (2e-3), and 10 steps do not amplify it. Measured after 10 steps:
# max |Δw| ≤ 6e-8 over the grid (2.98e-08 typical). atol 1e-6 leaves ~15× headroom and is
# 10^4× below the control (a different global batch: ~1e-2).
TOL=1e-6
for g in "${GRID[@]}"; do
  read -r name stage ranks micro gas <<< "$g"
  config "$stage" "$micro" "$gas" "$WORK/$name.json"
  train mlp "$ranks" "$WORK/$name.json" "$WORK/$name.log" --steps $K --save_dir "$WORK/$name" \
    --save_interval $((K / 2)) || { fail "$name run: $(tail -3 "$WORK/$name.log")"; continue; }
  n=$(ls "$WORK/$name/global_step$K"/zero_pp_rank_*_partitions.safetensors | wc -l)
  [ "$n" = "$ranks" ] || fail "$name: $n partition files for $ranks ranks"
  consolidate "$WORK/$name" "$WORK/$name.safetensors"
  out=$("$COMPARE" "$REF" "$WORK/$name.safetensors" --atol $TOL 2>&1) &&
    pass "stage $stage, $ranks ranks, GAS $gas vs stage 0 on 1 rank: $out" || fail "$name differs from stage 0: $out"
done
config 0 6 1 "$WORK/ctl.json"
train mlp 1 "$WORK/ctl.json" "$WORK/ctl.log" --steps $K --save_dir "$WORK/ctl" || fail "control run"
"$COMPARE" "$REF" "$WORK/ctl/global_step$K/model.safetensors" --atol $TOL > "$WORK/ctl.txt" 2>&1 &&
  fail "control: a different global batch compares equal: the tolerance is too loose: $(cat "$WORK/ctl.txt")" ||
  pass "control (global batch 6 instead of 12) is outside the tolerance: $(tail -1 "$WORK/ctl.txt")"
# gpt: stage 3 on 3 ranks (every layer gathered, persistence off) vs stage 0 on 1 rank.
GK=6
config 0 6 1 "$WORK/g0.json"; config 3 2 1 "$WORK/g3.json"
sed -i 's/"stage": 3,/"stage": 3, "stage3_param_persistence_threshold": 0,/' "$WORK/g3.json"
train gpt 1 "$WORK/g0.json" "$WORK/g0.log" --steps $GK --save_dir "$WORK/g0" || fail "gpt stage 0: $(tail -3 "$WORK/g0.log")"
train gpt 3 "$WORK/g3.json" "$WORK/g3.log" --steps $GK --save_dir "$WORK/g3" || fail "gpt stage 3: $(tail -3 "$WORK/g3.log")"
consolidate "$WORK/g3" "$WORK/g3.safetensors"
# The same reasoning as above: measured max |Δw| 1.2e-7 (ln_2 weight), ≤ 1.2e-8 elsewhere.
# Except c_attn.bias: its key third has a true gradient of exactly zero (a bias on every key
# adds the same q·b to a row's scores; softmax ignores it), so what it receives is rounding
# noise ~1e-10, which Adam turns into updates of lr·g/(|g| + eps) — different noise, different
# updates: measured 8.3e-7 there. It is compared on its own at 1e-5 (still 10^3× below the
# control's 1e-2).
G0=$WORK/g0/global_step$GK/model.safetensors
out=$("$COMPARE" "$G0" "$WORK/g3.safetensors" --atol $TOL --skip c_attn.bias 2>&1) &&
  pass "gpt stage 3 on 3 ranks vs stage 0 on 1 rank: $out" || fail "gpt stage 3 differs: $out"
out=$("$COMPARE" "$G0" "$WORK/g3.safetensors" --atol 1e-5 --match c_attn.bias 2>&1) &&
  pass "gpt c_attn.bias (q|k|v, k's gradient is pure rounding): $out" || fail "gpt c_attn.bias differs: $out"

# ---- 2. exact resume --------------------------------------------------------------------
config 2 6 1 "$WORK/s2bf.json" bf16
train mlp 2 "$WORK/s2bf.json" "$WORK/s2bf.log" --steps $K --save_dir "$WORK/s2bf" --save_interval $((K / 2)) ||
  fail "bf16 run: $(tail -3 "$WORK/s2bf.log")"
consolidate "$WORK/s2bf" "$WORK/s2bf.safetensors"
# fp16 at stage 3 with overflows injected at steps 2 and 3: the scale halves twice before the
# save and doubles after it (window 3), so the resumed run must continue the scaler's state.
config 3 6 1 "$WORK/s3fp.json" fp16
DSCPP_INJECT_OVERFLOW=2,3 train mlp 2 "$WORK/s3fp.json" "$WORK/s3fp.log" --steps $K --save_dir "$WORK/s3fp" \
  --save_interval $((K / 2)) || fail "fp16 run: $(tail -3 "$WORK/s3fp.log")"
consolidate "$WORK/s3fp" "$WORK/s3fp.safetensors"
for name in s1r2 s2r3 s3r4 s3r2 s2bf s3fp; do
  ranks=$(ls "$WORK/$name/global_step$K"/zero_pp_rank_*_partitions.safetensors | wc -l)
  resume_dir "$WORK/$name/global_step$((K / 2))" "$WORK/$name.half"
  train mlp "$ranks" "$WORK/$name.json" "$WORK/$name.half.log" --steps $K --load_dir "$WORK/$name.half" \
    --save_dir "$WORK/$name.half" || { fail "$name resume: $(tail -3 "$WORK/$name.half.log")"; continue; }
  grep -q "resumed from .*global_step$((K / 2)) at step $((K / 2))" "$WORK/$name.half.log" || fail "$name: no resume line"
  ok=1
  for r in $(seq 0 $((ranks - 1))); do
    f=global_step$K/zero_pp_rank_${r}_partitions.safetensors
    out=$("$COMPARE" "$WORK/$name/$f" "$WORK/$name.half/$f" 2>&1) || { ok=0; fail "$name resume, rank $r: $out"; }
  done
  consolidate "$WORK/$name.half" "$WORK/$name.half.safetensors"
  out=$("$COMPARE" "$WORK/$name.safetensors" "$WORK/$name.half.safetensors" 2>&1) || { ok=0; fail "$name resume: $out"; }
  [ $ok = 1 ] && pass "$name: $K straight == $((K / 2)) + save + load + $((K / 2)), bit for bit on $ranks rank files and consolidated"
done
# The step lines after the save: loss, loss scale and skipped steps the same in both runs.
# (The files alone cannot show a lost scaler state here: loss scales are powers of two, and
# scaling by one is exact on these gradients, so a fresh scaler gives the same weights — but
# a scale of 4096 → 8192 where the straight run has 2048 → 4096.)
steps_after() { grep -oE "step ([6-9]|10)/$K \| loss [0-9.]+ .*" "$1" | sed -E 's/ \| [0-9.]+ samples\/s//; s/ \| mem .*( \| loss scale)/\1/'; }
if [ -n "$(steps_after "$WORK/s3fp.log")" ] && [ "$(steps_after "$WORK/s3fp.log")" = "$(steps_after "$WORK/s3fp.half.log")" ]; then
  pass "fp16 resume continues the loss scaler: $(steps_after "$WORK/s3fp.half.log" | grep -oE 'step [0-9]+/[0-9]+|loss scale [0-9]+' | paste -sd' ')"
else
  fail "fp16 resume: the step lines differ: $(steps_after "$WORK/s3fp.log") vs $(steps_after "$WORK/s3fp.half.log")"
fi

# ---- 3. reshard 4 × stage 3 → 2 × stage 1 and 1 × stage 0 ------------------------------------
SRC=$WORK/s3r4/global_step$((K / 2))
for target in "1 2 6" "0 1 12"; do
  read -r stage ranks micro <<< "$target"
  d=$WORK/reshard_s${stage}r$ranks
  config "$stage" "$micro" 1 "$d.json"
  resume_dir "$SRC" "$d"
  train mlp "$ranks" "$d.json" "$d.log" --steps $K --load_dir "$d" --save_dir "$d" ||
    { fail "reshard to stage $stage on $ranks: $(tail -3 "$d.log")"; continue; }
  grep -q "resharding .*saved by 4 rank(s) at ZeRO stage 3" "$d.log" || fail "reshard: no resharding line in $d.log"
  consolidate "$d" "$d.safetensors"
  out=$("$COMPARE" "$REF" "$d.safetensors" --atol $TOL 2>&1) &&
    pass "4 ranks stage 3 → $ranks rank(s) stage $stage at step $((K / 2)), continued to $K: matches the unbroken run: $out" ||
    fail "reshard to stage $stage on $ranks ranks differs from the unbroken run: $out"
  out=$("$COMPARE" "$WORK/s3r4.safetensors" "$d.safetensors" --atol $TOL 2>&1) ||
    fail "reshard to stage $stage differs from the unbroken 4-rank run: $out"
done
# The resharding itself is lossless: loaded and saved again without a step at 2 × stage 1,
# 3 × stage 2 and 1 × stage 0, the master weights and both Adam moments are bit for bit those
# of the 4-rank stage-3 checkpoint (zero-to-fp32 --state consolidates a moment by name).
resume_dir "$SRC" "$WORK/src5"
for what in fp32 exp_avg exp_avg_sq; do
  "$DSCPP" zero-to-fp32 "$WORK/src5" "$WORK/src5.$what.safetensors" --state $what -q > /dev/null 2>&1 ||
    fail "zero-to-fp32 --state $what of the 4-rank checkpoint"
done
for target in "1 2 6" "2 3 4" "0 1 12"; do
  read -r stage ranks micro <<< "$target"
  d=$WORK/lossless_s${stage}r$ranks
  config "$stage" "$micro" 1 "$d.json"
  train mlp "$ranks" "$d.json" "$d.log" --steps $((K / 2)) --load_dir "$WORK/src5" --save_dir "$d" ||
    { fail "lossless reshard to stage $stage on $ranks: $(tail -3 "$d.log")"; continue; }
  ok=1
  for what in fp32 exp_avg exp_avg_sq; do
    "$DSCPP" zero-to-fp32 "$d" "$d.$what.safetensors" --state $what -q > /dev/null 2>&1 || fail "zero-to-fp32 $d $what"
    out=$("$COMPARE" "$WORK/src5.$what.safetensors" "$d.$what.safetensors" 2>&1) ||
      { ok=0; fail "reshard 4 × stage 3 → $ranks × stage $stage changed $what: $out"; }
  done
  [ $ok = 1 ] && pass "reshard 4 × stage 3 → $ranks × stage $stage is lossless: weights, exp_avg, exp_avg_sq bit for bit"
done
# Control: the same weights without the rest of the state (--init_from: fresh optimizer
# moments, schedule and data position) continue elsewhere.
consolidate "$SRC" "$WORK/half.safetensors"
train mlp 1 "$WORK/ref.json" "$WORK/wonly.log" --steps $((K / 2)) --init_from "$WORK/half.safetensors" \
  --save_dir "$WORK/wonly" || fail "weights-only run: $(tail -3 "$WORK/wonly.log")"
"$COMPARE" "$REF" "$WORK/wonly/global_step$((K / 2))/model.safetensors" --atol $TOL > "$WORK/wonly.txt" 2>&1 &&
  fail "control: weights without optimizer state compare equal: $(cat "$WORK/wonly.txt")" ||
  pass "control (weights alone, fresh optimizer and schedule) is outside the tolerance: $(tail -1 "$WORK/wonly.txt")"

# ---- 4. --init_from at stage 3; zero-to-fp32 of stage 0; progress --------------------------
train mlp 3 "$WORK/s3r3.json" "$WORK/init3.log" --steps 0 --init_from "$WORK/half.safetensors" --save_dir "$WORK/init3" ||
  fail "init_from at stage 3: $(tail -3 "$WORK/init3.log")"
consolidate "$WORK/init3" "$WORK/init3.safetensors"
out=$("$COMPARE" "$WORK/half.safetensors" "$WORK/init3.safetensors" 2>&1) &&
  pass "--init_from at stage 3 on 3 ranks holds the file's weights bit for bit ($out)" || fail "init_from stage 3: $out"
"$DSCPP" zero-to-fp32 "$WORK/ref" "$WORK/ref0.safetensors" --progress_interval 0 > "$WORK/ref0.out" 2> "$WORK/ref0.err" ||
  fail "zero-to-fp32 of stage 0: $(cat "$WORK/ref0.err")"
out=$("$COMPARE" "$REF" "$WORK/ref0.safetensors" 2>&1) && pass "zero-to-fp32 of a stage-0 checkpoint: $out" ||
  fail "zero-to-fp32 of stage 0: $out"
grep -q "zero-to-fp32: 1/6 tensors" "$WORK/ref0.err" && grep -q "wrote .*: master weights, 6 tensors, 30159 fp32 values" "$WORK/ref0.out" &&
  pass "progress and summary: $(cat "$WORK/ref0.out")" || fail "progress output: $(cat "$WORK/ref0.err" "$WORK/ref0.out")"

# ---- 5. killed save; mismatches ----------------------------------------------------------
S=$WORK/killed
train mlp 3 "$WORK/s2r3.json" "$WORK/k1.log" --steps 3 --save_dir "$S" || fail "killed: first save: $(tail -3 "$WORK/k1.log")"
DSCPP_FAULT_INJECT=save_before_commit train mlp 3 "$WORK/s2r3.json" "$WORK/k2.log" --steps 6 --load_dir "$S" --save_dir "$S" &&
  fail "killed: the run with the injected death succeeded"
grep -q "dying before committing global_step6" "$WORK/k2.log" || fail "killed: the fault was not injected"
[ "$(cat "$S/latest")" = global_step3 ] && [ ! -e "$S/global_step6" ] &&
  pass "killed save at stage 2 on 3 ranks: latest still names global_step3, global_step6 invisible" ||
  fail "killed save: latest '$(cat "$S/latest")', $(ls -A "$S")"
train mlp 3 "$WORK/s2r3.json" "$WORK/k3.log" --steps 6 --load_dir "$S" --save_dir "$S" &&
  grep -q "resumed from .*global_step3" "$WORK/k3.log" && ! ls -A "$S" | grep -q partial &&
  pass "killed save: the next run resumed from global_step3, committed global_step6 and removed the debris" ||
  fail "killed save: resume failed: $(tail -3 "$WORK/k3.log"); $(ls -A "$S")"
# Another model (fc1 48 wide instead of 37) is refused, named; another global batch is accepted and named.
"$DSCPP" --num_procs 2 --master_port "$(port)" "$MLP" --deepspeed_config "$WORK/s1r2.json" --no_eval --steps 6 \
  --load_dir "$WORK/s3r4" -- --limit 1536 --hidden 48,23 > "$WORK/mm.log" 2>&1
grep -q "parameter 'fc1.weight' has shape \[37, 784\] in it, the model declares \[48, 784\]" "$WORK/mm.log" &&
  pass "mismatched model: $(grep -o "parameter 'fc1.weight'[^;]*" "$WORK/mm.log" | head -1)" ||
  fail "mismatched model: $(tail -2 "$WORK/mm.log")"
config 1 3 1 "$WORK/b6.json"
train mlp 2 "$WORK/b6.json" "$WORK/mb.log" --steps 6 --load_dir "$WORK/s3r4"
grep -q "was trained with train_batch_size 12 (micro 3 x accumulation 1 x 4 ranks), this run has 6 .*accepted" "$WORK/mb.log" &&
  grep -q "resumed from .*at step" "$WORK/mb.log" &&
  pass "another global batch: accepted and named" || fail "another global batch: $(tail -2 "$WORK/mb.log")"

# ---- 6. PyPI safetensors opens the consolidated file ---------------------------------------
py=""
for cand in "${PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] || continue
  if "$cand" -c 'import numpy, safetensors.numpy' > /dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP (part 6): no python3 with numpy and safetensors (pip install numpy safetensors, or set PYTHON)"
else
  out=$("$py" - "$WORK/s3r4.safetensors" "$REF" "$TOL" 2>&1 <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
got, want, tol = load_file(sys.argv[1]), load_file(sys.argv[2]), float(sys.argv[3])
assert sorted(got) == sorted(want), f"names {sorted(got)} != {sorted(want)}"
worst = 0.0
for name, w in want.items():
    g = got[name]
    assert g.dtype == np.float32 and g.shape == w.shape, f"{name}: {g.dtype} {g.shape} vs {w.dtype} {w.shape}"
    worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))))
assert worst <= tol, f"max |a-b| {worst:.3g} > {tol}"
print(f"numpy read {len(got)} tensors ({sum(v.size for v in got.values())} values); max |a-b| vs the 1-rank run {worst:.3g}")
PY
  ) && pass "PyPI safetensors: $out" || fail "PyPI safetensors: $out"
fi

exit $FAILED
