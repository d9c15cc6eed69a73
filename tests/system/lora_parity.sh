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
#   5. PEFT loads the adapter dscpp trained and gives dscpp's eval loss for it (Python, when the
#      reference environment is installed);
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
eval_loss() { sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$1"; }

for c in llama_qv llama_all gpt2_attn qwen2_regex; do
  adapter=$HF/lora/$c/adapter base=$HF/$(field "$c" base_model)
  # 1. forward
  config "$WORK/eval.json" 0 4
  want=$(ref "$c" loss)
  if run "$c" 1 "$WORK/eval.json" "$WORK/$c.eval.log" --eval_only -- --lora_from "$adapter" &&
    got=$(eval_loss "$WORK/$c.eval.log") && close "$got" "$want" 2e-6; then
    pass "$c forward: loss $got, PEFT $want"
  else fail "$c forward: loss '${got:-}', PEFT $want"; tail -5 "$WORK/$c.eval.log"; fi

  # 2. backward
  cases="0:1 1:1 2:1 3:1 0:2 1:2 2:2 3:2"
  [ "$c" = llama_qv ] || cases="0:1 3:2"
  for s in $cases; do
    stage=${s%:*} ranks=${s#*:} tag="$c.s$stage.r$ranks"
    config "$WORK/$tag.json" "$stage" $((4 / ranks))
    if ! run "$c" "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --steps 1 --no_eval --save_dir "$WORK/$tag.ckpt" \
      -- --lora_from "$adapter" ||
      ! "$DSCPP" export-hf -q --adapter "$WORK/$tag.ckpt" "$WORK/$tag.adapter" > "$WORK/$tag.export.log" 2>&1; then
      fail "$tag: run or export"; tail -20 "$WORK/$tag.log" "$WORK/$tag.export.log"; continue
    fi
    if out=$("$COMPARE" "$WORK/$tag.adapter/adapter_model.safetensors" "$HF/lora/$c/reference.safetensors" \
      --b_prefix grad. --minus_from "$adapter/adapter_model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1) &&
      out2=$("$COMPARE" "$base/model.safetensors" "$WORK/$tag.ckpt/global_step1/frozen.safetensors" 2>&1); then
      pass "$c gradients, ZeRO $stage on $ranks rank(s): ${out##*compared }; base bit for bit: ${out2##*compared }"
    else fail "$c gradients, ZeRO $stage on $ranks rank(s): ${out:-} ${out2:-}"; fi
    [ "$tag" = "$c.s0.r1" ] && cp -r "$WORK/$tag.adapter" "$WORK/$c.trained"
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
  else fail "$c merge: ${out:-run or export failed}"; tail -5 "$WORK/$c.merge.log" "$WORK/$c.merge.export.log"; fi
  rm -rf "$WORK/$c.m.ckpt" "$WORK/$c.merged"
done

# 4. a fresh adapter starts where the base model is (B = 0), and trains
config "$WORK/fresh.json" 3 2
base_loss=$("$COMPARE" --print "$HF/llama_gqa/reference.safetensors" loss)
if run llama_qv 2 "$WORK/fresh.json" "$WORK/fresh.log" --steps 2 --eval_interval 1 --save_dir "$WORK/fresh.ckpt" \
  -- --lora "r=8,alpha=16,target=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"; then
  first=$(sed -n 's/.*step 1\/2 | loss \([0-9.]*\).*/\1/p' "$WORK/fresh.log")
  close "$first" "$base_loss" 1e-4 && pass "fresh --lora: step 1 loss $first = the base model's $base_loss" ||
    fail "fresh --lora: step 1 loss '$first', base $base_loss"
else fail "fresh --lora run"; tail -10 "$WORK/fresh.log"; fi

# 5. PEFT loads what dscpp trained and gives dscpp's loss for it
PY=${DSCPP_HF_PYTHON:-/opt/dscpp-hf-venv/bin/python}
if [ -x "$PY" ] && "$PY" -c "import peft" 2> /dev/null && [ -d "$WORK/llama_qv.trained" ]; then
  config "$WORK/eval.json" 0 4
  run llama_qv 1 "$WORK/eval.json" "$WORK/trained.eval.log" --eval_only -- --lora_from "$WORK/llama_qv.trained"
  ours=$(eval_loss "$WORK/trained.eval.log")
  theirs=$("$PY" "$SRC/tests/tools/peft_loss.py" "$HF/llama_gqa" "$WORK/llama_qv.trained" "$HF/lora/llama_qv/reference.safetensors" 2>&1 | tail -1)
  close "$ours" "$theirs" 2e-6 && pass "PEFT loads dscpp's trained adapter: loss $theirs, dscpp $ours" ||
    fail "PEFT on dscpp's adapter: PEFT '$theirs', dscpp '$ours'"
else echo "skip: PEFT check (no $PY with peft)"; fi

# 6. refusals
expect_error() {  # expect_error WHAT PATTERN CASE [run args...]
  local what=$1 pattern=$2
  shift 2
  if run "$@" > /dev/null; then fail "$what: accepted"; return; fi
  if grep -q -- "$pattern" "$WORK/err.log"; then pass "$what: $(grep -m1 -o -- "$pattern.*" "$WORK/err.log" | cut -c1-160)"
  else fail "$what: expected '$pattern'"; tail -3 "$WORK/err.log"; fi
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
