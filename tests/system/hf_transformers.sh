#!/usr/bin/env bash
# transformers itself on both ends of the Hugging Face path, in the venv scripts/setup.sh makes
# (transformers 4.44.2 on Debian's torch; skipped, 77, without it):
#   1. the reference data of tests/data/hf regenerates (make.sh --check: byte for byte, or within
#      rounding for reference.safetensors on another CPU);
#   2. a directory `dscpp export-hf` writes loads with from_pretrained (no missing, unexpected
#      or misshapen tensor) and gives transformers' logits: from a step-0 checkpoint the
#      reference logits (1e-5), after 3 AdamW steps at ZeRO 3 on 2 ranks the loss transformers
#      gets by applying its own 3 steps (1e-5);
#   3. `dscpp generate` (token by token with KV caches) continues a prompt greedily with the same
#      12 tokens as transformers' generate;
#   4. the T5s' exports from a step-0 checkpoint at ZeRO 3 on 2 ranks load in transformers and give
#      the reference loss (1e-6), and their pytorch_model.bin saves train from the same first loss.
# Usage: hf_transformers.sh DSCPP LLAMA_SO GPT2_SO SOURCE_ROOT T5_SO
set -u
DSCPP=$1 LLAMA=$2 GPT2=$3 SRC=$4 T5=$5
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
DATA=$SRC/tests/data/hf
if ! "$VENV/bin/python" -c "import transformers, safetensors" 2> /dev/null; then
  echo "hf_transformers: no transformers venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
WORK=$(mktemp -d /tmp/dscpp_hf_transformers.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
if out=$(nice "$DATA/make.sh" --check "$VENV" 2>&1); then echo "ok: ${out##*$'\n'}"
else echo "FAIL: the reference data does not regenerate: $out"; FAILED=1; fi
cat > "$WORK/adamw.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0, "zero_optimization": {"stage": 3},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}}}
JSON
for m in llama_gqa llama3_tied gpt2 qwen2 mistral_swa; do
  so=$LLAMA && [ "$m" = gpt2 ] && so=$GPT2
  for steps in 0 3; do
    expect=initial && [ $steps = 3 ] && expect=after3
    if ! "$DSCPP" --num_procs 2 --master_port "$(port)" "$so" --deepspeed_config "$WORK/adamw.json" --steps $steps \
      --no_eval --save_dir "$WORK/$m.$steps" -- --from_hf "$DATA/$m" --data "$DATA/$m/tokens.bin" \
      --eval_data "$DATA/$m/tokens.bin" --context 16 \
      > "$WORK/$m.$steps.log" 2>&1 || ! "$DSCPP" export-hf -q "$WORK/$m.$steps" "$WORK/$m.$steps.hf" > /dev/null; then
      echo "FAIL: $m $steps steps: run or export"; tail -20 "$WORK/$m.$steps.log"; FAILED=1; continue
    fi
    if out=$("$DATA/make.sh" --load-export "$m" "$WORK/$m.$steps.hf" --expect $expect "$VENV" 2>&1); then
      echo "ok: $(echo "$out" | grep '^load-export' | tail -1)"
    else echo "FAIL: $m ($expect): $out"; FAILED=1; fi
  done
done
for m in llama_gqa llama3_tied gpt2 qwen2 mistral_swa; do
  so=$LLAMA && [ "$m" = gpt2 ] && so=$GPT2
  ours=$("$DSCPP" generate "$so" --prompt_ids 5,17,3 --max_new_tokens 12 -- --from_hf "$DATA/$m" \
    --data "$DATA/$m/tokens.bin" --context 16 2>&1 | sed -n 's/^ids: //p')
  theirs=$("$VENV/bin/python" - "$DATA/$m" 2> /dev/null <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32, attn_implementation="eager")
out = m.generate(torch.tensor([[5, 17, 3]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
print(",".join(str(t) for t in out[0, 3:].tolist()))
PY
)
  if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then echo "ok: $m greedy generation, as transformers: $ours"
  else echo "FAIL: $m greedy generation: dscpp '$ours', transformers '$theirs'"; FAILED=1; fi
done
for m in t5_v10 t5_v11; do
  if ! "$DSCPP" --num_procs 2 --master_port "$(port)" "$T5" --deepspeed_config "$WORK/adamw.json" --steps 0 --no_eval \
    --save_dir "$WORK/$m" -- --from_hf "$DATA/$m" --data "$DATA/$m/train.jsonl" > "$WORK/$m.log" 2>&1 ||
    ! "$DSCPP" export-hf -q "$WORK/$m" "$WORK/$m.hf" > /dev/null; then
    echo "FAIL: $m: run or export"; tail -20 "$WORK/$m.log"; FAILED=1; continue
  fi
  if out=$("$VENV/bin/python" "$DATA/make_t5.py" --load-export "$m" "$WORK/$m.hf" 2>&1); then echo "ok: ${out##*$'\n'}"
  else echo "FAIL: $out"; FAILED=1; fi
  # transformers' own pytorch_model.bin (every tied name saved) starts from the same loss
  "$VENV/bin/python" -c "import sys; from transformers import T5ForConditionalGeneration as T
T.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2], safe_serialization=False)" "$DATA/$m" "$WORK/$m.bin" \
    2> /dev/null
  got=$("$DSCPP" --num_procs 1 --master_port "$(port)" "$T5" --deepspeed_config "$WORK/adamw.json" --eval_only -- \
    --from_hf "$WORK/$m.bin" --data "$DATA/$m/train.jsonl" --eval_data "$DATA/$m/train.jsonl" 2>&1 |
    sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p')
  want=$("$VENV/bin/python" -c "import sys; from safetensors.torch import load_file
print('%.7f' % float(load_file(sys.argv[1])['loss']))" "$DATA/$m/reference.safetensors" 2> /dev/null)
  if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(d <= 2e-6 && d >= -2e-6) }'; then
    echo "ok: $m from pytorch_model.bin: loss $got, transformers $want"
  else echo "FAIL: $m from pytorch_model.bin: loss '$got', reference $want"; FAILED=1; fi
done
exit $FAILED
