#!/usr/bin/env bash
# Frozen parameters (--freeze / --train_only, PyTorch's requires_grad=False) on the tiny GQA Llama
# of tests/data/hf, starting from its Hugging Face weights:
#   1. SGD with momentum at ZeRO stages 0–3 on 1 and 2 ranks trains the same model: every
#      configuration's per-step losses and trained weights equal stage 0 on one rank (losses
#      |Δ| ≤ 2e-6, weights |Δ| ≤ 2e-6: only the order of the gradient sums differs), and the
#      frozen tensors come out of training bit for bit the weights they started from;
#   2. with AdamW, a run resumed from its checkpoint ends bit for bit where the uninterrupted run
#      ends;
#   3. 16-bit parameters with offloaded parameters and optimizer keep the frozen tensors the
#      16-bit rounding of the file's (bf16: within 2^-8 relative);
#   4. the log counts what trains and the plan holds optimizer state for it only;
#   5. bad patterns and a checkpoint whose frozen set differs are refused by name, saving nothing.
# Usage: frozen_params.sh DSCPP RUNTIME LLAMA_SO COMPARE SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 LLAMA=$3 COMPARE=$4 SRC=$5
BASE=$SRC/tests/data/hf/llama_gqa
WORK=$(mktemp -d /tmp/dscpp_frozen.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }

FREEZE=(--freeze 'model.embed_tokens.*' --freeze '*norm*')
# run RANKS CONFIG LOG [runtime args...]
run() {
  local ranks=$1 cfg=$2 log=$3
  shift 3
  local args=(--deepspeed_config "$cfg" "$@" -- --from_hf "$BASE" --data "$BASE/tokens.bin" --eval_data "$BASE/tokens.bin" --context 16)
  if [ "$ranks" = 1 ]; then "$RUNTIME" --model "$LLAMA" "${args[@]}" > "$log" 2>&1
  else "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$LLAMA" "${args[@]}" > "$log" 2>&1; fi
}
ADAMW='{"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}}'
# Across stages and rank counts only the order of the gradient sums differs, which Adam's
# normalisation turns into up to 2·lr where a gradient is ~0 (hf_parity.sh): SGD with momentum
# and weight decay compares them, AdamW the resumes (bit for bit within one configuration).
SGD='{"type": "SGD", "params": {"lr": 0.5, "momentum": 0.9, "weight_decay": 0.01}}'
OPTIMIZER=$ADAMW
config() {  # config FILE STAGE MICRO [zero_optimization extras] [top-level extras]
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": $3, "steps_per_print": 1, "gradient_clipping": 0,
 "zero_optimization": {"stage": $2 ${4:-}}, ${5:-} "zero_allow_untested_optimizer": true,
 "optimizer": $OPTIMIZER,
 "csv_monitor": {"enabled": true, "output_path": "${1%.json}_csv", "job_name": "run"}}
JSON
}
losses() { tail -n +2 "$1"_csv/run/Train_Samples_train_loss.csv | cut -d, -f2 | tr '\n' ' '; }
same_losses() {  # same_losses "A" "B": element-wise within 2e-6
  awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != m || n == 0) exit 1;
    for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 2e-6) exit 1 } }'
}
frozen_of() { echo "$1/global_step$2/frozen.safetensors"; }

# 1. every stage, 1 and 2 ranks
OPTIMIZER=$SGD
for c in 0:1 1:1 2:1 3:1 0:2 1:2 2:2 3:2; do
  stage=${c%:*} ranks=${c#*:} tag="s$stage.r$ranks"
  config "$WORK/$tag.json" "$stage" $((4 / ranks))
  if ! run "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --steps 3 --no_eval --save_dir "$WORK/$tag.ckpt" "${FREEZE[@]}"; then
    fail "$tag: run"; tail -20 "$WORK/$tag.log"; continue
  fi
  if out=$("$COMPARE" "$(frozen_of "$WORK/$tag.ckpt" 3)" "$BASE/model.safetensors" 2>&1); then
    pass "ZeRO $stage on $ranks rank(s): frozen tensors bit for bit the initial ones (${out##*compared })"
  else fail "ZeRO $stage on $ranks rank(s): frozen tensors changed: $out"; fi
  l=$(losses "$WORK/$tag")
  if ! "$DSCPP" zero-to-fp32 -q "$WORK/$tag.ckpt" "$WORK/$tag.fp32.safetensors" > "$WORK/$tag.z2f.log" 2>&1; then
    fail "$tag: zero-to-fp32"; cat "$WORK/$tag.z2f.log"; continue
  fi
  if [ "$tag" = s0.r1 ]; then ref_losses=$l; pass "stage 0, 1 rank: losses $l"; continue; fi
  if same_losses "$l" "$ref_losses" &&
    out=$("$COMPARE" "$WORK/$tag.fp32.safetensors" "$WORK/s0.r1.fp32.safetensors" --atol 2e-6 --complete 1 2>&1); then
    pass "ZeRO $stage on $ranks rank(s) = stage 0 on one: losses $l, weights ${out##*compared }"
  else fail "ZeRO $stage on $ranks rank(s): losses '$l' vs '$ref_losses', weights: ${out:-}"; fi
done
grep -q "trainable parameters: 21,504 of 24,736" "$WORK/s0.r1.log" &&
  pass "the log says what trains" || { fail "no 'trainable parameters' line"; grep -i trainable "$WORK/s0.r1.log"; }

OPTIMIZER=$ADAMW
# 2. resume: 2 steps, then 2 more from the checkpoint = 4 steps at once (bit for bit)
for c in 0:1 3:2; do
  stage=${c%:*} ranks=${c#*:} tag="resume.s$stage.r$ranks"
  config "$WORK/$tag.json" "$stage" $((4 / ranks))
  if run "$ranks" "$WORK/$tag.json" "$WORK/$tag.a.log" --steps 4 --no_eval --save_dir "$WORK/$tag.a" "${FREEZE[@]}" &&
    run "$ranks" "$WORK/$tag.json" "$WORK/$tag.b.log" --steps 2 --no_eval --save_dir "$WORK/$tag.b" "${FREEZE[@]}" &&
    run "$ranks" "$WORK/$tag.json" "$WORK/$tag.c.log" --steps 4 --no_eval --load_dir "$WORK/$tag.b" \
      --save_dir "$WORK/$tag.b" "${FREEZE[@]}" &&
    "$DSCPP" zero-to-fp32 -q "$WORK/$tag.a" "$WORK/$tag.a.safetensors" > /dev/null &&
    "$DSCPP" zero-to-fp32 -q "$WORK/$tag.b" "$WORK/$tag.b.safetensors" > /dev/null &&
    out=$("$COMPARE" "$WORK/$tag.b.safetensors" "$WORK/$tag.a.safetensors" --complete 1 2>&1) &&
    out2=$("$COMPARE" "$(frozen_of "$WORK/$tag.b" 4)" "$(frozen_of "$WORK/$tag.a" 4)" --complete 1 2>&1); then
    pass "ZeRO $stage on $ranks rank(s): resumed at step 2 = uninterrupted, bit for bit (${out##*compared }; frozen ${out2##*compared })"
  else fail "ZeRO $stage on $ranks rank(s) resume: ${out:-run failed}"; tail -5 "$WORK/$tag".*.log; fi
done

# 3. bf16, stage 3, parameters and optimizer offloaded to the CPU, 2 ranks
config "$WORK/bf16.json" 3 2 ', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' \
  '"bf16": {"enabled": true},'
if run 2 "$WORK/bf16.json" "$WORK/bf16.log" --steps 2 --no_eval --save_dir "$WORK/bf16.ckpt" "${FREEZE[@]}" &&
  out=$("$COMPARE" "$(frozen_of "$WORK/bf16.ckpt" 2)" "$BASE/model.safetensors" --rtol 4e-3 --atol 1e-30 2>&1); then
  pass "bf16 + offload at stage 3 on 2 ranks: frozen tensors the bf16 rounding of the initial ones (${out##*compared })"
else fail "bf16 + offload: ${out:-run failed}"; tail -10 "$WORK/bf16.log"; fi

# 4. the plan: optimizer state for what trains only (AdamW fp32: 8 bytes of state per element)
config "$WORK/plan.json" 0 4
run 1 "$WORK/plan.json" "$WORK/plan.log" --steps 1 --no_eval --train_only 'model.layers.0.self_attn.*'
trained=$(sed -n 's/.*trainable parameters: \([0-9,]*\) of.*/\1/p' "$WORK/plan.log" | tr -d ,)
opt=$(grep -m1 '^optimizer state' "$WORK/plan.log" | awk '{print $3 " " $4}')
if [ -n "$trained" ] && [ "$opt" = "$(awk -v n="$trained" 'BEGIN { printf "%.2f KiB", n * 8 / 1024 }')" ]; then
  pass "--train_only: $trained parameters train, optimizer state planned $opt"
else fail "--train_only plan: trained '$trained', optimizer state '$opt'"; grep -E 'trainable|optimizer state' "$WORK/plan.log"; fi

# 5. refusals
expect_error() {  # expect_error WHAT PATTERN RANKS CONFIG [args...]
  local what=$1 pattern=$2
  shift 2
  if run "$@" && true; then fail "$what: accepted"; return; fi
  if grep -q -- "$pattern" "$WORK/err.log"; then pass "$what: $(grep -m1 -o -- "$pattern.*" "$WORK/err.log" | cut -c1-150)"
  else fail "$what: expected '$pattern'"; tail -5 "$WORK/err.log"; fi
}
expect_error "--freeze matching nothing" "matches no parameter" 1 "$WORK/plan.json" "$WORK/err.log" --steps 1 \
  --freeze 'model.embed_token.*'
grep -q "closest: 'model.embed_tokens.weight'" "$WORK/err.log" && pass "it names the closest parameter" ||
  fail "no closest name: $(tail -1 "$WORK/err.log")"
expect_error "--freeze '*'" "leave no parameter" 1 "$WORK/plan.json" "$WORK/err.log" --steps 1 --freeze '*'
before=$(ls "$WORK/s0.r1.ckpt")
expect_error "resuming a frozen checkpoint with everything trained" "is frozen in it and trains in this run" 1 \
  "$WORK/s0.r1.json" "$WORK/err.log" --steps 4 --load_dir "$WORK/s0.r1.ckpt" --save_dir "$WORK/s0.r1.ckpt"
[ "$(ls "$WORK/s0.r1.ckpt")" = "$before" ] && pass "nothing saved" || fail "the save directory changed"

exit $FAILED
