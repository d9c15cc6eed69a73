#!/usr/bin/env bash
# ZeRO-Inference generation across ranks (`dscpp --num_procs 2 PLUGIN --deepspeed_config ZERO3 --generate`):
# each rank continues its own prompts (prompt i on rank i mod 2) while both join every gather, and
# the outputs equal `dscpp generate` on one rank with the whole model:
#   - the GQA Llama of tests/data/hf, 3 prompts of ids (rank 1 has one, so it follows rank 0's steps);
#   - the T5 v1.1 of tests/data/hf, 4 sources with 3 beams and offload_param cpu;
#   - the same at stage 3 with stage3_max_live_parameters below the model's size: the parameter peak
#     per rank stays below the model.
# Usage: zero_generate.sh DSCPP RUNTIME LLAMA_SO T5_SO SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 LLAMA=$3 T5=$4 SRC=$5
DATA=$SRC/tests/data/hf
WORK=$(mktemp -d /tmp/dscpp_zero_generate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }

zero3() {  # zero3 FILE OFFLOAD MAX_LIVE
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
 "zero_optimization": {"stage": 3, "offload_param": {"device": "$2"}, "stage3_param_persistence_threshold": 0,
                       "stage3_max_live_parameters": $3, "stage3_prefetch_bucket_size": $3}}
JSON
}
# single PLUGIN OUT PROMPT_IDS [generate args] -- [plugin args]: each prompt alone on one rank, ids per line
single() {
  local plugin=$1 out=$2 prompts=$3
  shift 3
  : > "$out"
  IFS=';' read -ra each <<< "$prompts"
  for p in "${each[@]}"; do
    "$RUNTIME" --model "$plugin" --generate --prompt_ids "$p" "$@" 2>> "$out.err" | sed -n 's/^ids: //p' >> "$out"
  done
}
# spread PLUGIN CONFIG OUT PROMPT_IDS [args]: 2 ranks; the outputs in prompt order, one per line
spread() {
  local plugin=$1 cfg=$2 out=$3 prompts=$4
  shift 4
  "$DSCPP" --num_procs 2 --master_port "$(port)" "$plugin" --deepspeed_config "$cfg" --generate --prompt_ids "$prompts" \
    "$@" > "$out.log" 2>&1 || { echo "run failed:"; tail -5 "$out.log"; return 1; }
  # rank r prints its prompts in order: merge them back (prompt i is rank i mod 2's (i div 2)-th)
  local r0 r1
  mapfile -t r0 < <(grep '^\[rank 0\]   out=' "$out.log" | sed 's/.*out=//')
  mapfile -t r1 < <(grep '^\[rank 1\]   out=' "$out.log" | sed 's/.*out=//')
  : > "$out"
  for ((i = 0; i < ${#r0[@]} + ${#r1[@]}; ++i)); do
    if ((i % 2 == 0)); then echo "${r0[$((i / 2))]}" >> "$out"; else echo "${r1[$((i / 2))]}" >> "$out"; fi
  done
}

LLAMA_PROMPTS="5,17,33;7,8;9"
single "$LLAMA" "$WORK/llama.1" "$LLAMA_PROMPTS" --max_new_tokens 6 -- --from_hf "$DATA/llama_gqa" --context 16
zero3 "$WORK/z3.json" none 1000000000
if spread "$LLAMA" "$WORK/z3.json" "$WORK/llama.2" "$LLAMA_PROMPTS" --max_new_tokens 6 -- --from_hf "$DATA/llama_gqa" \
  --context 16 && [ -s "$WORK/llama.1" ] && cmp -s "$WORK/llama.1" "$WORK/llama.2"; then
  pass "llama_gqa, ZeRO 3 on 2 ranks, 3 prompts: $(paste -sd' ' "$WORK/llama.2")"
else fail "llama_gqa on 2 ranks: $(paste -sd' ' "$WORK/llama.2" 2>/dev/null), one rank: $(paste -sd' ' "$WORK/llama.1")"; fi

T5_PROMPTS=$(sed -e 's/.*"input_ids": \[\([0-9, ]*\)\].*/\1/' -e 's/ //g' "$DATA/t5_v11/train.jsonl" | paste -sd';')
single "$T5" "$WORK/t5.1" "$T5_PROMPTS" --max_new_tokens 8 --num_beams 3 -- --from_hf "$DATA/t5_v11"
zero3 "$WORK/z3cpu.json" cpu 1000000000
if spread "$T5" "$WORK/z3cpu.json" "$WORK/t5.2" "$T5_PROMPTS" --max_new_tokens 8 --num_beams 3 -- --from_hf \
  "$DATA/t5_v11" && [ -s "$WORK/t5.1" ] && cmp -s "$WORK/t5.1" "$WORK/t5.2"; then
  pass "t5_v11, ZeRO 3 with offload_param cpu on 2 ranks, 4 sources, 3 beams: $(paste -sd' ' "$WORK/t5.2")"
else fail "t5_v11 on 2 ranks: $(paste -sd' ' "$WORK/t5.2" 2>/dev/null), one rank: $(paste -sd' ' "$WORK/t5.1")"; fi

# A gather window of 20,000 elements: the parameter peak per rank is its partition plus a few layers.
zero3 "$WORK/z3small.json" none 20000
model=$(grep -o 'planned model states=[0-9]*' "$WORK/t5.2.log" | head -1 | cut -d= -f2)
if spread "$T5" "$WORK/z3small.json" "$WORK/t5.3" "$T5_PROMPTS" --max_new_tokens 8 --num_beams 3 -- --from_hf \
  "$DATA/t5_v11" && cmp -s "$WORK/t5.1" "$WORK/t5.3"; then
  peak=$(grep -o 'memory peak per rank (bytes): params=[0-9]*' "$WORK/t5.3.log" | head -1 | sed 's/.*params=//')
  whole=$(grep -o 'DeepSpeed.s estimate=[0-9]*' "$WORK/t5.3.log" | head -1)
  size=$(awk -v m="$model" 'BEGIN { print m }')
  if [ -n "$peak" ] && [ -n "$size" ] && [ "$peak" -lt "$size" ]; then
    pass "t5_v11 with stage3_max_live_parameters 20000: the same outputs, parameter peak $peak B per rank of a $size B model"
  else fail "t5_v11 with a small gather window: parameter peak '$peak' not below the model's $size B ($whole)"; fi
else fail "t5_v11 with a small gather window: $(paste -sd' ' "$WORK/t5.3" 2>/dev/null)"; fi
exit $FAILED
