#!/usr/bin/env bash
# `dscpp generate`: every family decodes token by token with its caches and, at every step,
# gives the logits the training forward gives at that position (--check_decode, within 1e-4 of
# the largest; measured: equal bits on the CPU); sampling is reproducible from the seed, top_k 1
# is greedy; prompts decoded together equal each decoded alone; a prompt token outside the
# vocabulary and a plugin that cannot decode are refused.
# Usage: generate.sh DSCPP LLAMA_SO GPT2_SO GPT_SO SOURCE_ROOT
set -u
DSCPP=$1 LLAMA=$2 GPT2=$3 GPT=$4 SRC=$5
DATA=$SRC/tests/data/hf
WORK=$(mktemp -d /tmp/dscpp_generate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
gen() {  # gen NAME MODEL [generate options...]: runs on the parity model MODEL's weights and tokens
  local name=$1 m=$2 so=$LLAMA
  shift 2
  [ "$m" = gpt2 ] && so=$GPT2
  "$DSCPP" generate "$so" "$@" -- --from_hf "$DATA/$m" --data "$DATA/$m/tokens.bin" --context 16 > "$WORK/$name.log" 2>&1
}
ids() { sed -n 's/^ids: //p' "$WORK/$1.log"; }
for m in llama_gqa llama3_tied qwen2 gpt2; do
  if gen "$m" "$m" --prompt_ids 5,17,3 --max_new_tokens 12 --check_decode && grep -q "check_decode: .*: ok" "$WORK/$m.log"; then
    echo "ok: $m: $(grep -o 'generated.*tokens/s' "$WORK/$m.log"), ids $(ids "$m"); $(grep -o 'max difference [^ ]*' "$WORK/$m.log")"
  else echo "FAIL: $m"; cat "$WORK/$m.log"; FAILED=1; fi
done
# A sliding window (Mistral's, 6 tokens) decodes from the window's positions only; its training
# samples carry first keys, which --check_decode's ids-only forward cannot give: refused, named.
# (hf_transformers checks its greedy tokens against transformers'.)
gen swa mistral_swa --prompt_ids 5,17,3 --max_new_tokens 12
gen swa_check mistral_swa --prompt_ids 5,17,3 --max_new_tokens 12 --check_decode
if [ "$(ids swa)" = "5,5,4,83,58,4,4,4,35,66,56,56" ] && grep -q "check_decode needs samples of token ids alone" "$WORK/swa_check.log"; then
  echo "ok: sliding window: ids $(ids swa); --check_decode refused"
else echo "FAIL: sliding window: ids '$(ids swa)'; $(tail -1 "$WORK/swa_check.log")"; FAILED=1; fi
# Prompts of different lengths decoded together (--batch_size 3: a batch of 3 and one of 1, on the
# CPU and cuda-sim) give each prompt's ids decoded alone, every family, with the sliding window
# and GPT-2's learned positions reaching the context's last position.
P="5,17,3,9;40,2;7,7,7,7,7,1,2;11"
for m in llama_gqa mistral_swa qwen2 gpt2; do
  gen "$m.alone" "$m" --prompt_ids "$P" --max_new_tokens 12
  gen "$m.batch" "$m" --prompt_ids "$P" --max_new_tokens 12 --batch_size 3
  gen "$m.sim" "$m" --prompt_ids "$P" --max_new_tokens 12 --batch_size 3 --device cuda-sim
  if [ "$(ids "$m.alone" | wc -l)" = 4 ] && [ "$(ids "$m.alone")" = "$(ids "$m.batch")" ] &&
    [ "$(ids "$m.alone")" = "$(ids "$m.sim")" ]; then
    echo "ok: $m: 4 prompts decoded 3 at a time equal each alone: $(ids "$m.batch" | paste -sd' ')"
  else echo "FAIL: $m batched: '$(ids "$m.batch" | paste -sd' ')' cuda-sim '$(ids "$m.sim" | paste -sd' ')' vs alone" \
    "'$(ids "$m.alone" | paste -sd' ')' $(tail -2 "$WORK/$m.batch.log")"; FAILED=1; fi
done
gen t1 llama_gqa --prompt_ids 5,17,3 --max_new_tokens 12 --temperature 0.8 --seed 7
gen t2 llama_gqa --prompt_ids 5,17,3 --max_new_tokens 12 --temperature 0.8 --seed 7
gen t3 llama_gqa --prompt_ids 5,17,3 --max_new_tokens 12 --temperature 0.8 --seed 8
gen k1 llama_gqa --prompt_ids 5,17,3 --max_new_tokens 12 --temperature 0.8 --top_k 1
if [ -n "$(ids t1)" ] && [ "$(ids t1)" = "$(ids t2)" ] && [ "$(ids t1)" != "$(ids t3)" ] && [ "$(ids k1)" = "$(ids llama_gqa)" ]; then
  echo "ok: sampling: seed 7 twice $(ids t1), seed 8 $(ids t3); top_k 1 is greedy"
else echo "FAIL: sampling: $(ids t1) / $(ids t2) / $(ids t3) / top_k 1 $(ids k1) vs greedy $(ids llama_gqa)"; FAILED=1; fi
gen bad llama_gqa --prompt_ids 5,96 --max_new_tokens 2
if grep -q "prompt token 96 is outside the vocabulary of 96" "$WORK/bad.log"; then echo "ok: an out-of-vocabulary prompt is refused"
else echo "FAIL: out-of-vocabulary prompt: $(tail -2 "$WORK/bad.log")"; FAILED=1; fi
"$DSCPP" generate "$GPT" --prompt_ids 1 -- --tokens "$DATA/gpt2/tokens.bin" --vocab_size 96 --context 16 \
  --layers 1 --d_model 32 --heads 2 --sample_chars 0 > "$WORK/nodecode.log" 2>&1
if grep -q "cannot decode one token at a time" "$WORK/nodecode.log"; then echo "ok: a plugin without decode is refused, by name"
else echo "FAIL: plugin without decode: $(tail -2 "$WORK/nodecode.log")"; FAILED=1; fi
exit $FAILED
