#!/usr/bin/env bash
# LoRA adapters against Hugging Face PEFT 0.12 (reference data in tests/data/hf/lora, made by
# make_lora.py: tiny Llama, GPT-2 and Qwen2 bases with adapters of non-zero random A and B, on
# several target sets, rsLoRA and the regex form of target_modules):
#   1. forward: --eval_only --from_hf BASE --lora_from ADAPTER gives PEFT's loss;
#   2. backward: one SGD step of lr 1 from the adapter, exported with `dscpp export-hf --adapter`,
#      is the adapter minus PEFT's gradient of every lora_A and lora_B, at ZeRO stages 0–3 on 1
#      and 2 ranks, and the base weights come out bit for bit as they went in;
#   3. merge: `dscpp export-hf --merge` of the adapter equals merge_and_unload's weights;
#   4. a fresh adapter (--lora SPEC: B = 0) starts at the base model's loss;
#   5. a fresh adapter trained on instruction data at ZeRO 3 on 2 ranks through the launcher,
#      exported with --adapter, loads in PEFT and gives dscpp's eval loss for it (Python, when the
#      reference environment is installed);
#   and cuda-sim's gradients, an exact resume, bf16 with offloaded parameters and optimizer;
#   6. bad input is refused by name: r 0, a target that matches nothing, an adapter of another
#      base, an unknown key — and nothing is saved.
# Tolerances as hf_parity's (measured there on the same models): losses |Δ| ≤ 2e-6; gradients
# normwise 1e-5 of the tensor's largest; merged weights |Δ| ≤ 1e-6 (one fp32 GEMM of rank r).
# Usage: lora_parity.sh DSCPP RUNTIME LLAMA_SO GPT2_SO COMPARE SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 LLAMA=$3 GPT2=$4 COMPARE=$5 SRC=$6
HF=$SRC/tests/data/hf
WORK=$(mktemp -d /tmp/dscpp_lora.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
field() { sed -n "s/.*\"$2\": \"\\([^\"]*\\)\".*/\\1/p" "$HF/lora/$1/case.json"; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= t) }'; }
ref() { "$COMPARE" --print "$HF/lora/$1/reference.safetensors" "$2"; }

# run CASE RANKS CONFIG LOG [runtime args...] [-- more plugin args]
run() {
  local c=$1 ranks=$2 cfg=$3 log=$4
  shift 4
  local base plugin runtime_args=() plugin_args=()
  base=$HF/${BASE_OVERRIDE:-$(field "$c" base_model)}
  [ "$(field "$c" base_model)" = gpt2 ] && plugin=$GPT2 || plugin=$LLAMA
  while [ $# -gt 0 ] && [ "$1" != -- ]; do runtime_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift && plugin_args=("$@")
  local args=(--deepspeed_config "$cfg" "${runtime_args[@]}" -- --from_hf "$base" --data "$base/tokens.bin"
    --eval_data "$base/tokens.bin" --context 16 "${plugin_args[@]}")
  if [ "$ranks" = 1 ]; then "$RUNTIME" --model "$plugin" "${args[@]}" > "$log" 2>&1
  else "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$plugin" "${args[@]}" > "$log" 2>&1; fi
}
config() {  # config FILE STAGE MICRO
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": $3, "steps_per_print": 1, "gradient_clipping": 0,
 "zero_optimization": {"stage": $2}, "optimizer": {"type": "SGD", "params": {"lr": 1.0, "momentum": 0, "weight_decay": 0}},
 "zero_allow_untested_optimizer": true}
JSON
}
base_loss=$("$COMPARE" --print "$HF/llama_gqa/reference.safetensors" loss)
eval_loss() { sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$1"; }

for c in llama_qv llama_all gpt2_attn qwen2_regex; do
  adapter=$HF/lora/$c/adapter base=$HF/$(field "$c" base_model)
  # 1. forward
  config "$WORK/eval.json" 0 4
  want=$(ref "$c" loss)
  if run "$c" 1 "$WORK/eval.json" "$WORK/$c.eval.log" --eval_only -- --lora_from "$adapter" &&
    got=$(eval_loss "$WORK/$c.eval.log") && close "$got" "$want" 2e-6; then
    pass "$c forward: loss $got, PEFT $want"
  else fail "$c forward: loss '${got:-}', PEFT $want"; tail -n 5 "$WORK/$c.eval.log"; fi

  # 2. backward
  cases="0:1 1:1 2:1 3:1 0:2 1:2 2:2 3:2"
  [ "$c" = llama_qv ] || cases="0:1 3:2"
  for s in $cases; do
    stage=${s%:*} ranks=${s#*:} tag="$c.s$stage.r$ranks"
    config "$WORK/$tag.json" "$stage" $((4 / ranks))
    if ! run "$c" "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --steps 1 --no_eval --save_dir "$WORK/$tag.ckpt" \
      -- --lora_from "$adapter" ||
      ! "$DSCPP" export-hf -q --adapter "$WORK/$tag.ckpt" "$WORK/$tag.adapter" > "$WORK/$tag.export.log" 2>&1; then
      fail "$tag: run or export"; tail -n 20 "$WORK/$tag.log" "$WORK/$tag.export.log"; continue
    fi
    if out=$("$COMPARE" "$WORK/$tag.adapter/adapter_model.safetensors" "$HF/lora/$c/reference.safetensors" \
      --b_prefix grad. --minus_from "$adapter/adapter_model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1) &&
      out2=$("$COMPARE" "$base/model.safetensors" "$WORK/$tag.ckpt/global_step1/frozen.safetensors" 2>&1); then
      pass "$c gradients, ZeRO $stage on $ranks rank(s): ${out##*compared }; base bit for bit: ${out2##*compared }"
    else fail "$c gradients, ZeRO $stage on $ranks rank(s): ${out:-} ${out2:-}"; fi
    rm -rf "$WORK/$tag.ckpt" "$WORK/$tag.adapter"
  done

  # 3. merge (a step-0 checkpoint holds the adapter as it was read)
  config "$WORK/merge.json" 2 2
  if run "$c" 2 "$WORK/merge.json" "$WORK/$c.merge.log" --steps 0 --no_eval --save_dir "$WORK/$c.m.ckpt" \
    -- --lora_from "$adapter" &&
    "$DSCPP" export-hf -q --merge "$WORK/$c.m.ckpt" "$WORK/$c.merged" > "$WORK/$c.merge.export.log" 2>&1 &&
    out=$("$COMPARE" "$WORK/$c.merged/model.safetensors" "$HF/lora/$c/reference.safetensors" --b_prefix merged. \
      --atol 1e-6 --complete 1 2>&1); then
    pass "$c merge = merge_and_unload: ${out##*compared }"
  else fail "$c merge: ${out:-run or export failed}"; tail -n 5 "$WORK/$c.merge.log" "$WORK/$c.merge.export.log"; fi
  rm -rf "$WORK/$c.m.ckpt" "$WORK/$c.merged"
done

# The CUDA code path (cuda-sim: the CUDA table's kernels on the CPU): gradients as on the CPU table.
config "$WORK/sim.json" 0 4
tag=sim
if run llama_all 1 "$WORK/sim.json" "$WORK/$tag.log" --device cuda-sim --steps 1 --no_eval --save_dir "$WORK/$tag.ckpt" \
  -- --lora_from "$HF/lora/llama_all/adapter" &&
  "$DSCPP" export-hf -q --adapter "$WORK/$tag.ckpt" "$WORK/$tag.adapter" > /dev/null 2>&1 &&
  out=$("$COMPARE" "$WORK/$tag.adapter/adapter_model.safetensors" "$HF/lora/llama_all/reference.safetensors" \
    --b_prefix grad. --minus_from "$HF/lora/llama_all/adapter/adapter_model.safetensors" --normwise 1 --rtol 1e-5 \
    --complete 1 2>&1); then
  pass "llama_all on cuda-sim: gradients ${out##*compared }"
else fail "llama_all on cuda-sim: ${out:-run or export failed}"; tail -n 5 "$WORK/$tag.log"; fi

# Exact resume: 2 AdamW steps, then 2 more from the checkpoint = 4 at once, bit for bit (ZeRO 3, 2 ranks).
adamw() {  # adamw FILE [zero_optimization extras] [top-level extras]
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3 ${2:-}}, ${3:-}
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}}}
JSON
}
adamw "$WORK/adamw.json"
A=(-- --lora_from "$HF/lora/llama_qv/adapter")
if run llama_qv 2 "$WORK/adamw.json" "$WORK/r.a.log" --steps 4 --no_eval --save_dir "$WORK/r.a" "${A[@]}" &&
  run llama_qv 2 "$WORK/adamw.json" "$WORK/r.b.log" --steps 2 --no_eval --save_dir "$WORK/r.b" "${A[@]}" &&
  run llama_qv 2 "$WORK/adamw.json" "$WORK/r.c.log" --steps 4 --no_eval --load_dir "$WORK/r.b" --save_dir "$WORK/r.b" \
    "${A[@]}" &&
  "$DSCPP" export-hf -q --adapter "$WORK/r.a" "$WORK/r.a.adapter" > /dev/null 2>&1 &&
  "$DSCPP" export-hf -q --adapter "$WORK/r.b" "$WORK/r.b.adapter" > /dev/null 2>&1 &&
  out=$("$COMPARE" "$WORK/r.b.adapter/adapter_model.safetensors" "$WORK/r.a.adapter/adapter_model.safetensors" \
    --complete 1 2>&1); then
  pass "resumed at step 2 = uninterrupted, bit for bit: ${out##*compared }"
else fail "LoRA resume: ${out:-run failed}"; tail -n 5 "$WORK"/r.*.log; fi

# bf16 with the parameters and the optimizer offloaded: the adapter trains, the base is bf16's rounding.
adamw "$WORK/bf16.json" ', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' \
  '"bf16": {"enabled": true},'
if run llama_qv 2 "$WORK/bf16.json" "$WORK/bf16.log" --steps 3 --no_eval --save_dir "$WORK/bf16.ckpt" \
  -- --lora "r=4,alpha=8,target=q_proj,v_proj" &&
  out=$("$COMPARE" "$HF/llama_gqa/model.safetensors" "$WORK/bf16.ckpt/global_step3/frozen.safetensors" --rtol 4e-3 \
    --atol 1e-30 2>&1) &&
  l=$(sed -n 's/.*step 3\/3 | loss \([0-9.]*\).*/\1/p' "$WORK/bf16.log") && [ -n "$l" ] &&
  awk -v a="$l" -v b="$base_loss" 'BEGIN { exit !(a < b) }'; then
  pass "bf16 + offload at stage 3: loss $l after 3 steps (base $base_loss); base weights bf16's rounding: ${out##*compared }"
else fail "bf16 + offload: ${out:-run failed} loss '${l:-}'"; tail -n 5 "$WORK/bf16.log"; fi

# 4. a fresh adapter starts where the base model is (B = 0), and trains
config "$WORK/fresh.json" 3 2
if run llama_qv 2 "$WORK/fresh.json" "$WORK/fresh.log" --steps 2 --eval_interval 1 --save_dir "$WORK/fresh.ckpt" \
  -- --lora "r=8,alpha=16,target=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"; then
  first=$(sed -n 's/.*step 1\/2 | loss \([0-9.]*\).*/\1/p' "$WORK/fresh.log")
  close "$first" "$base_loss" 1e-4 && pass "fresh --lora: step 1 loss $first = the base model's $base_loss" ||
    fail "fresh --lora: step 1 loss '$first', base $base_loss"
else fail "fresh --lora run"; tail -n 10 "$WORK/fresh.log"; fi

# 5. The fine-tuning a user runs: 2 ranks at ZeRO 3 through the launcher, a fresh adapter on
#    instruction data (ids and labels, loss on the answers), exported for PEFT; PEFT loads it and
#    gives dscpp's loss on the reference batch.
PY=${DSCPP_HF_PYTHON:-/opt/dscpp-hf-venv/bin/python}
awk 'BEGIN { srand(7); for (n = 0; n < 24; ++n) { ids = ""; labels = ""; len = 6 + n % 9;
  for (i = 0; i < len; ++i) { t = int(rand() * 96); ids = ids (i ? ", " : "") t; labels = labels (i ? ", " : "") (i < 3 ? -100 : t) }
  printf "{\"input_ids\": [%s], \"labels\": [%s]}\n", ids, labels } }' > "$WORK/sft.jsonl"
adamw "$WORK/zero3.json"
if "$DSCPP" --num_procs 2 --master_port "$(port)" "$LLAMA" --deepspeed_config "$WORK/zero3.json" --steps 4 --no_eval \
  --save_dir "$WORK/story" -- --from_hf "$HF/llama_gqa" --lora "r=16,alpha=32,target=q_proj,v_proj" \
  --sft_data "$WORK/sft.jsonl" --packing --context 16 > "$WORK/story.log" 2>&1 &&
  "$DSCPP" export-hf -q --adapter "$WORK/story" "$WORK/story.adapter" > "$WORK/story.export.log" 2>&1 &&
  config "$WORK/eval.json" 0 4 &&
  run llama_qv 1 "$WORK/eval.json" "$WORK/story.eval.log" --eval_only -- --lora_from "$WORK/story.adapter"; then
  ours=$(eval_loss "$WORK/story.eval.log")
  if [ -x "$PY" ] && "$PY" -c "import peft" 2> /dev/null; then
    theirs=$("$PY" "$SRC/tests/tools/peft_loss.py" "$HF/llama_gqa" "$WORK/story.adapter" \
      "$HF/lora/llama_qv/reference.safetensors" 2>&1 | tail -n 1)
    close "$ours" "$theirs" 2e-6 &&
      pass "an adapter trained on instruction data at ZeRO 3 on 2 ranks loads in PEFT: loss $theirs, dscpp $ours" ||
      fail "PEFT on dscpp's adapter: PEFT '$theirs', dscpp '$ours'"
  else echo "skip: PEFT check (no $PY with peft); dscpp's eval loss of the adapter: $ours"; fi
else fail "fine-tuning run, export or eval"; tail -n 5 "$WORK/story.log" "$WORK/story.export.log" "$WORK/story.eval.log"; fi

# 6. refusals
expect_error() {  # expect_error WHAT PATTERN CASE [run args...]
  local what=$1 pattern=$2
  shift 2
  if run "$@" > /dev/null; then fail "$what: accepted"; return; fi
  if grep -q -- "$pattern" "$WORK/err.log"; then pass "$what: $(grep -m1 -o -- "$pattern.*" "$WORK/err.log" | cut -c1-160)"
  else fail "$what: expected '$pattern'"; tail -n 3 "$WORK/err.log"; fi
}
config "$WORK/err.json" 0 4
expect_error "r 0" "r must be" llama_qv 1 "$WORK/err.json" "$WORK/err.log" --steps 1 --save_dir "$WORK/none" \
  -- --lora "r=0,target=q_proj"
expect_error "a target that matches nothing" "matches no" llama_qv 1 "$WORK/err.json" "$WORK/err.log" --steps 1 \
  --save_dir "$WORK/none" -- --lora "r=4,target=q_proj,qkv_proj"
expect_error "an unknown key" "alpha" llama_qv 1 "$WORK/err.json" "$WORK/err.log" --steps 1 \
  --save_dir "$WORK/none" -- --lora "r=4,alhpa=8,target=q_proj"
# llama3_tied has one key/value head where llama_gqa has two: v_proj's lora_B is half as tall.
BASE_OVERRIDE=llama3_tied expect_error "an adapter of another base" "shape" llama_qv 1 "$WORK/err.json" \
  "$WORK/err.log" --steps 1 --save_dir "$WORK/none" -- --lora_from "$HF/lora/llama_qv/adapter"
[ -e "$WORK/none" ] && fail "a refused run saved something" || pass "nothing saved"

exit $FAILED
