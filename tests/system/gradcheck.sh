#!/usr/bin/env bash
# `dscpp gradcheck` passes on every shipped model family (also with packed documents, and LoRA with
# dropout) and on the hand-written gpt example, and catches a plugin whose backward is wrong
# (tests/data/plugins/wrong_grad.cpp: one bias gradient counted twice), naming the parameter.
# Usage: gradcheck.sh DSCPP LLAMA_SO GPT2_SO GPT_SO WRONG_SO SOURCE_ROOT T5_SO
set -u
DSCPP=$1 LLAMA=$2 GPT2=$3 GPT=$4 WRONG=$5 SRC=$6 T5=$7
DATA=$SRC/tests/data/hf
WORK=$(mktemp -d /tmp/dscpp_gradcheck.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
check() {  # check NAME WANT_STATUS PATTERN PLUGIN [plugin args...]
  local name=$1 want=$2 pattern=$3 plugin=$4
  shift 4
  "$DSCPP" gradcheck "$plugin" -- "$@" > "$WORK/$name.log" 2>&1
  local status=$?
  if [ "$status" = "$want" ] && grep -q "$pattern" "$WORK/$name.log"; then
    echo "ok: $name: $(grep '^gradcheck' "$WORK/$name.log" | tail -1)"
  else
    echo "FAIL: $name (exit $status, wanted $want)"; cat "$WORK/$name.log"; FAILED=1
  fi
}
check llama_gqa 0 "gradcheck: all 21 parameters" "$LLAMA" --from_hf "$DATA/llama_gqa" --data "$DATA/llama_gqa/tokens.bin" --context 16
check llama3_tied 0 "gradcheck: all 20 parameters" "$LLAMA" --from_hf "$DATA/llama3_tied" --data "$DATA/llama3_tied/tokens.bin" --context 16
# T5 v1.1: two stacks, relative position biases shared through each stack, cross-attention over a
# padded batch of sources. (v1.0's ReLU puts kinks within the finite differences' step, 1e-2, so
# they miss by 1–2% there; its gradients are checked against transformers' in t5_parity.)
check t5_v11 0 "gradcheck: all 66 parameters" "$T5" --from_hf "$DATA/t5_v11" --data "$DATA/t5_v11/train.jsonl"
check qwen2 0 "gradcheck: all 27 parameters" "$LLAMA" --from_hf "$DATA/qwen2" --data "$DATA/qwen2/tokens.bin" --context 16
check gpt2 0 "gradcheck: all 28 parameters" "$GPT2" --from_hf "$DATA/gpt2" --data "$DATA/gpt2/tokens.bin" --context 16
# Packed documents: RoPE at document positions and GPT-2's learned positions looked up per token.
check gpt2_documents 0 "gradcheck: all 28 parameters" "$GPT2" --from_hf "$DATA/gpt2" --data "$DATA/gpt2/tokens.bin" \
  --context 16 --reset_attention_mask --reset_position_ids --eos_id 36
check llama_documents 0 "gradcheck: all 21 parameters" "$LLAMA" --from_hf "$DATA/llama_gqa" \
  --data "$DATA/llama_gqa/tokens.bin" --context 16 --reset_attention_mask --reset_position_ids --eos_id 12
check mistral_swa 0 "gradcheck: all 21 parameters" "$LLAMA" --from_hf "$DATA/mistral_swa" \
  --data "$DATA/mistral_swa/tokens.bin" --context 16
# LoRA with lora_dropout 0.3 on every Linear, from PEFT's adapter with random A and B (so A's gradients
# are not 0): gradcheck's calls share one rng_seed, so the mask is fixed and the loss stays a smooth
# function of the adapters, the mask applied to drop(x) and to the input's gradient alike.
mkdir "$WORK/adapter" && cp "$DATA/lora/llama_all/adapter/"* "$WORK/adapter/"
sed -i 's/"lora_dropout": 0.0/"lora_dropout": 0.3/' "$WORK/adapter/adapter_config.json"
grep -q '"lora_dropout": 0.3' "$WORK/adapter/adapter_config.json" || { echo "FAIL: no dropout in the adapter"; FAILED=1; }
check llama_lora_dropout 0 "gradcheck: all 28 parameters" "$LLAMA" --from_hf "$DATA/llama_gqa" \
  --data "$DATA/llama_gqa/tokens.bin" --context 16 --lora_from "$WORK/adapter"
check gpt_example 0 "gradcheck: all .* agree" "$GPT" --tokens "$DATA/gpt2/tokens.bin" --vocab_size 96 --context 16 \
  --layers 1 --d_model 32 --heads 2 --sample_chars 0
check wrong_grad 1 "shift.bias .*FAIL" "$WRONG" --config "$DATA/llama_gqa/config.json" --data "$DATA/llama_gqa/tokens.bin" --context 16
grep -q "embed.weight .* ok" "$WORK/wrong_grad.log" || { echo "FAIL: wrong_grad: the correct layers should pass"; FAILED=1; }
# The runtime's buffer guards: a layer writing past the workspace it declares is named.
"$DSCPP" gradcheck "$WRONG" -- --overrun --config "$DATA/llama_gqa/config.json" --data "$DATA/llama_gqa/tokens.bin" \
  --context 16 > "$WORK/overrun.log" 2>&1
if grep -q "layer 'shift' wrote past its workspace buffer in forward: it declares 2048 bytes per sample" "$WORK/overrun.log"; then
  echo "ok: overrun: $(grep -o "layer 'shift' wrote past.*" "$WORK/overrun.log" | cut -c1-120)"
else echo "FAIL: overrun not caught"; cat "$WORK/overrun.log"; FAILED=1; fi
exit $FAILED
