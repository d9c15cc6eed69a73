#!/usr/bin/env bash
# The model families of models/ against Hugging Face transformers, through the reference data
# of tests/data/hf (tiny random GPT-2, GQA Llama, tied Llama-3, Qwen2, Mistral with a sliding
# window made and run by transformers 4.44.2; README there), without Python:
#   1. forward: --eval_only --from_hf gives transformers' loss on the reference batch;
#   2. backward: one SGD step of lr 1 from the HF weights, exported with `dscpp export-hf`, is
#      the weights minus transformers' gradient, at ZeRO stages 0–3 on 1 and 2 ranks;
#   3. AdamW: 3 steps (lr 1e-2, betas 0.9/0.999, eps 1e-8, weight decay 0.1, as the reference)
#      give transformers' per-step losses and parameters (on 2 ranks at stage 3, and with
#      gradient accumulation on 1 rank at stage 0);
#   4. export round trip: a step-0 checkpoint exported is the HF file again, names, shapes and
#      values;
#   5. packed documents: with --reset_attention_mask --reset_position_ids the loss and gradients
#      of transformers running each document of the windows on its own.
# Tolerances, measured on this data:
#   losses: |Δ| ≤ 2e-6 (the runtime prints 6 decimals; measured ≤ 5e-7);
#   gradients: normwise 1e-5 of the tensor's largest gradient (measured ≤ 2e-7 absolute on
#     gradients up to ~0.1; the subtraction that recovers them costs ~3e-8);
#   AdamW parameters: 3e-5 absolute where |reference gradient| > 1e-3 (measured ≤ 3.5e-6; 3e-5 is
#     0.1% of the 3·lr the steps move a weight; dropping weight decay moves them ~1e-3). Where the
#     gradient is ~0 (the key bias, whose gradient is exactly 0 mathematically) Adam's update is
#     sign(rounding noise)·lr and two correct implementations differ by up to 2·lr: not compared.
# Usage: hf_parity.sh DSCPP RUNTIME LLAMA_SO GPT2_SO COMPARE SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 LLAMA=$3 GPT2=$4 COMPARE=$5 SRC=$6
DATA=$SRC/tests/data/hf
WORK=$(mktemp -d /tmp/dscpp_hf_parity.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }

PLUGIN_ARGS=()  # more plugin arguments for run
plugin_of() { [ "$1" = gpt2 ] && echo "$GPT2" || echo "$LLAMA"; }
# run MODEL RANKS CONFIG LOG [runtime args...]
run() {
  local m=$1 ranks=$2 cfg=$3 log=$4
  shift 4
  local args=(--deepspeed_config "$cfg" "$@" -- --from_hf "$DATA/$m" --data "$DATA/$m/tokens.bin"
    --eval_data "$DATA/$m/tokens.bin" --context 16 "${PLUGIN_ARGS[@]}")
  if [ "$ranks" = 1 ]; then "$RUNTIME" --model "$(plugin_of "$m")" "${args[@]}" > "$log" 2>&1
  else "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$(plugin_of "$m")" "${args[@]}" > "$log" 2>&1; fi
}
config() {  # config FILE STAGE MICRO OPTIMIZER_JSON
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": $3, "steps_per_print": 1, "gradient_clipping": 0,
 "zero_optimization": {"stage": $2}, "optimizer": $4, "zero_allow_untested_optimizer": true,
 "csv_monitor": {"enabled": true, "output_path": "${1%.json}_csv", "job_name": "run"}}
JSON
}
ref() { "$COMPARE" --print "$DATA/$1/reference.safetensors" "$2"; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }
SGD='{"type": "SGD", "params": {"lr": 1.0, "momentum": 0, "weight_decay": 0}}'
ADAMW='{"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}}'

for m in llama_gqa llama3_tied gpt2 qwen2 mistral_swa; do
  # 1. forward
  config "$WORK/eval.json" 0 4 "$SGD"
  if run "$m" 1 "$WORK/eval.json" "$WORK/$m.eval.log" --eval_only; then
    got=$(sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$WORK/$m.eval.log") want=$(ref "$m" loss)
    if [ -n "$got" ] && close "$got" "$want" 2e-6; then pass "$m forward: loss $got, transformers $want"
    else fail "$m forward: loss '$got', transformers $want"; tail -5 "$WORK/$m.eval.log"; fi
  else fail "$m --eval_only run"; tail -20 "$WORK/$m.eval.log"; fi

  # 2. backward at every stage, 1 and 2 ranks (GPT-2 and Mistral at two corners: the layers are
  #    shared)
  cases="0:1 1:1 2:1 3:1 0:2 1:2 2:2 3:2"
  [ "$m" = gpt2 ] || [ "$m" = mistral_swa ] && cases="0:1 3:2"
  for c in $cases; do
    stage=${c%:*} ranks=${c#*:} tag="$m.sgd.s$stage.r$ranks"
    config "$WORK/$tag.json" "$stage" $((4 / ranks)) "$SGD"
    if ! run "$m" "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --steps 1 --no_eval --save_dir "$WORK/$tag.ckpt" ||
      ! "$DSCPP" export-hf -q "$WORK/$tag.ckpt" "$WORK/$tag.hf" > "$WORK/$tag.export.log" 2>&1; then
      fail "$tag: run or export"; tail -20 "$WORK/$tag.log" "$WORK/$tag.export.log"; continue
    fi
    if out=$("$COMPARE" "$WORK/$tag.hf/model.safetensors" "$DATA/$m/reference.safetensors" --b_prefix grad. \
      --minus_from "$DATA/$m/model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1); then
      pass "$m gradients, ZeRO $stage on $ranks rank(s): ${out##*compared }"
    else fail "$m gradients, ZeRO $stage on $ranks rank(s): $out"; fi
    rm -rf "$WORK/$tag.ckpt" "$WORK/$tag.hf"
  done

  # 3. AdamW: 3 steps
  for c in 3:2:2 0:1:2; do
    IFS=: read -r stage ranks micro <<< "$c"
    tag="$m.adamw.s$stage.r$ranks"
    config "$WORK/$tag.json" "$stage" "$micro" "$ADAMW"
    if ! run "$m" "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --steps 3 --no_eval --save_dir "$WORK/$tag.ckpt" ||
      ! "$DSCPP" export-hf -q "$WORK/$tag.ckpt" "$WORK/$tag.hf" > "$WORK/$tag.export.log" 2>&1; then
      fail "$tag: run or export"; tail -20 "$WORK/$tag.log" "$WORK/$tag.export.log"; continue
    fi
    mapfile -t losses < <(tail -n +2 "$WORK/$tag"_csv/run/Train_Samples_train_loss.csv | cut -d, -f2)
    for k in 0 1 2; do
      want=$(ref "$m" "loss_step.$k")
      if close "${losses[$k]:-nan}" "$want" 2e-6; then :; else fail "$tag step $((k + 1)) loss ${losses[$k]:-none}, transformers $want"; fi
    done
    if out=$("$COMPARE" "$WORK/$tag.hf/model.safetensors" "$DATA/$m/reference.safetensors" --b_prefix after3. \
      --atol 3e-5 --complete 1 --where grad. --above 1e-3 2>&1); then
      pass "$m AdamW, ZeRO $stage on $ranks rank(s), losses ${losses[*]}: ${out##*compared }"
    else fail "$m AdamW, ZeRO $stage on $ranks rank(s): $out"; fi
    [ "$tag" = "$m.adamw.s3.r2" ] && cp -r "$WORK/$tag.hf" "$WORK/$m.after3.hf"
    rm -rf "$WORK/$tag.ckpt" "$WORK/$tag.hf"
  done

  # 4. export round trip from a step-0 checkpoint: exactly the file it started from
  config "$WORK/zero.json" 2 2 "$SGD"
  out=""
  if run "$m" 2 "$WORK/zero.json" "$WORK/$m.zero.log" --steps 0 --no_eval --save_dir "$WORK/$m.zero.ckpt" &&
    "$DSCPP" export-hf -q "$WORK/$m.zero.ckpt" "$WORK/$m.zero.hf" > "$WORK/$m.zero.export.log" 2>&1 &&
    out=$("$COMPARE" "$WORK/$m.zero.hf/model.safetensors" "$DATA/$m/model.safetensors" --complete 1 2>&1) &&
    cmp -s <(tr -d ' \n' < "$WORK/$m.zero.hf/config.json") <(tr -d ' \n' < "$DATA/$m/config.json"); then
    pass "$m export round trip: ${out##*compared }, config.json the same"
  else fail "$m export round trip: ${out:-run or export failed}"; tail -5 "$WORK/$m.zero.log" "$WORK/$m.zero.export.log"; fi
done

# The CUDA code path (cuda-sim: the CUDA table's kernels run on the CPU): forward loss and
# gradients of the biased GQA Qwen2, the tied Llama 3 (RoPE scaling) and the sliding-window
# Mistral (masked attention), through the new ops.
for m in qwen2 llama3_tied mistral_swa; do
  config "$WORK/sim.json" 0 4 "$SGD"
  out=""
  if run "$m" 1 "$WORK/sim.json" "$WORK/$m.sim.log" --device cuda-sim --steps 1 --eval_interval 1 \
    --save_dir "$WORK/$m.sim.ckpt" && "$DSCPP" export-hf -q "$WORK/$m.sim.ckpt" "$WORK/$m.sim.hf" > /dev/null &&
    out=$("$COMPARE" "$WORK/$m.sim.hf/model.safetensors" "$DATA/$m/reference.safetensors" --b_prefix grad. \
      --minus_from "$DATA/$m/model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1) &&
    close "$(sed -n 's/.*step 1\/1 | loss \([0-9.]*\).*/\1/p' "$WORK/$m.sim.log")" "$(ref "$m" loss)" 2e-4; then
    pass "$m on cuda-sim: loss and gradients: ${out##*compared }"
  else fail "$m on cuda-sim: ${out:-run failed}"; tail -5 "$WORK/$m.sim.log"; fi
done

# Packed documents (--reset_attention_mask --reset_position_ids, end token docs.eod): the loss and
# gradients of the reference's documents run one by one through transformers (tolerances as
# above); on cuda-sim too. Neither flag alone gives GPT-2's (learned positions restart, and
# attention stops, at each document), and without them the loss is the packed one: loss.
for m in llama_gqa gpt2 mistral_swa; do
  eod=$(ref "$m" docs.eod) want=$(ref "$m" docs.loss)
  PLUGIN_ARGS=(--reset_attention_mask --reset_position_ids --eos_id "$eod")
  config "$WORK/eval.json" 0 4 "$SGD"
  got=""
  run "$m" 1 "$WORK/eval.json" "$WORK/$m.docs.log" --eval_only &&
    got=$(sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$WORK/$m.docs.log")
  if [ -n "$got" ] && close "$got" "$want" 2e-6 && ! close "$got" "$(ref "$m" loss)" 1e-3; then
    pass "$m packed documents (end token $eod) forward: loss $got, transformers document by document $want"
  else fail "$m packed documents forward: loss '$got', transformers $want"; tail -3 "$WORK/$m.docs.log"; fi
  for c in 0:1:cpu 3:2:cpu 0:1:cuda-sim; do
    IFS=: read -r stage ranks device <<< "$c"
    tag="$m.docs.s$stage.r$ranks.$device"
    config "$WORK/$tag.json" "$stage" $((4 / ranks)) "$SGD"
    out=""
    if run "$m" "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --device "$device" --steps 1 --no_eval \
      --save_dir "$WORK/$tag.ckpt" && "$DSCPP" export-hf -q "$WORK/$tag.ckpt" "$WORK/$tag.hf" > /dev/null &&
      out=$("$COMPARE" "$WORK/$tag.hf/model.safetensors" "$DATA/$m/reference.safetensors" --b_prefix docs.grad. \
        --minus_from "$DATA/$m/model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1); then
      pass "$m packed documents gradients, ZeRO $stage on $ranks rank(s), $device: ${out##*compared }"
    else fail "$m packed documents gradients, ZeRO $stage on $ranks rank(s), $device: ${out:-run failed}"; tail -5 "$WORK/$tag.log"; fi
    rm -rf "$WORK/$tag.ckpt" "$WORK/$tag.hf"
  done
done
for flag in --reset_attention_mask --reset_position_ids; do
  PLUGIN_ARGS=("$flag" --eos_id "$(ref gpt2 docs.eod)")
  got=""
  run gpt2 1 "$WORK/eval.json" "$WORK/gpt2.half.log" --eval_only &&
    got=$(sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$WORK/gpt2.half.log")
  if [ -n "$got" ] && ! close "$got" "$(ref gpt2 docs.loss)" 1e-4 && ! close "$got" "$(ref gpt2 loss)" 1e-4; then
    pass "gpt2 with $flag alone: loss $got, neither packed nor document by document"
  else fail "gpt2 with $flag alone: loss '$got'"; tail -3 "$WORK/gpt2.half.log"; fi
done
PLUGIN_ARGS=()

# Refusals: a misshapen tensor, missing parameters (unless --init_partial), unused tensors.
config "$WORK/eval.json" 0 4 "$SGD"
refused() {  # refused NAME CONFIG_EDIT WEIGHTS [plugin args...]: runs --eval_only on an edited model dir
  local name=$1 edit=$2 weights=$3
  shift 3
  mkdir -p "$WORK/$name" && sed "$edit" "$DATA/llama_gqa/config.json" > "$WORK/$name/config.json"
  cp "$weights" "$WORK/$name/model.safetensors"
  "$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$WORK/$name" \
    --data "$DATA/llama_gqa/tokens.bin" --context 16 "$@" > "$WORK/$name.log" 2>&1
}
refused shape 's/x/x/' "$DATA/llama3_tied/model.safetensors"  # 1 kv head's shapes in a 2-kv-head model
if grep -q "has shape \[8, 32\] in the file but the model declares \[16, 32\]" "$WORK/shape.log"; then
  pass "a misshapen tensor is refused, by name"
else fail "misshapen tensor: $(tail -3 "$WORK/shape.log")"; fi
refused missing 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$DATA/llama_gqa/model.safetensors"
refused partial 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$DATA/llama_gqa/model.safetensors" --init_partial
if grep -q "9 parameter(s) missing: 'model.layers.2" "$WORK/missing.log" &&
  grep -q "keep their initial values" "$WORK/partial.log" && grep -q "eval only: loss" "$WORK/partial.log"; then
  pass "missing parameters are refused, and keep their init with --init_partial"
else fail "missing parameters: $(tail -2 "$WORK/missing.log") / $(tail -2 "$WORK/partial.log")"; fi
refused unused 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' "$DATA/llama_gqa/model.safetensors"
if grep -q "9 tensor(s) the model does not use: 'model.layers.1" "$WORK/unused.log"; then
  pass "unused tensors are refused, by name"
else fail "unused tensors: $(tail -3 "$WORK/unused.log")"; fi
# A sharded export (an index and 3+ shards) is read back by --from_hf, and gives the same loss.
config "$WORK/stage3.json" 3 2 "$SGD"
cp "$DATA/llama3_tied/config.json" "$WORK/tied.config.json"
if run llama3_tied 2 "$WORK/stage3.json" "$WORK/shard.log" --steps 0 --no_eval --save_dir "$WORK/shard.ckpt" &&
  "$DSCPP" export-hf -q --max_shard_size 20KB "$WORK/shard.ckpt" "$WORK/sharded" > /dev/null &&
  [ -f "$WORK/sharded/model.safetensors.index.json" ] && [ -f "$WORK/sharded/model-00003-of-00005.safetensors" ] &&
  "$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$WORK/sharded" \
    --data "$DATA/llama3_tied/tokens.bin" --eval_data "$DATA/llama3_tied/tokens.bin" --context 16 > "$WORK/sharded.log" 2>&1 &&
  grep -q "eval only: loss 4.7219" "$WORK/sharded.log"; then
  pass "a sharded export ($(ls "$WORK/sharded" | grep -c '^model-') shards and an index) loads back: $(grep -o 'loss [0-9.]*' "$WORK/sharded.log" | head -1)"
else fail "sharded export: $(tail -3 "$WORK/shard.log" "$WORK/sharded.log" 2> /dev/null)"; ls "$WORK/sharded" 2> /dev/null; fi

# Shared parameters with parameter offload (SGD: the gradient check) and with optimizer offload
# (AdamW, whose CPU optimizer offload runs: the 3-step check), ZeRO 3 on 2 ranks.
offload_config() {  # FILE OFFLOAD_KEY OPTIMIZER
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0, "zero_allow_untested_optimizer": true,
 "zero_optimization": {"stage": 3, "$2": {"device": "cpu"}}, "optimizer": $3}
JSON
}
offload_config "$WORK/offload_param.json" offload_param "$SGD"
offload_config "$WORK/offload_opt.json" offload_optimizer "$ADAMW"
out=""
if run llama3_tied 2 "$WORK/offload_param.json" "$WORK/offload_param.log" --steps 1 --no_eval --save_dir "$WORK/op.ckpt" &&
  "$DSCPP" export-hf -q "$WORK/op.ckpt" "$WORK/op.hf" > /dev/null &&
  out=$("$COMPARE" "$WORK/op.hf/model.safetensors" "$DATA/llama3_tied/reference.safetensors" --b_prefix grad. \
    --minus_from "$DATA/llama3_tied/model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1); then
  pass "tied gradients with parameter offload: ${out##*compared }"
else fail "tied gradients with parameter offload: ${out:-run failed}"; tail -5 "$WORK/offload_param.log"; fi
out=""
if run llama3_tied 2 "$WORK/offload_opt.json" "$WORK/offload_opt.log" --steps 3 --no_eval --save_dir "$WORK/oo.ckpt" &&
  "$DSCPP" export-hf -q "$WORK/oo.ckpt" "$WORK/oo.hf" > /dev/null &&
  out=$("$COMPARE" "$WORK/oo.hf/model.safetensors" "$DATA/llama3_tied/reference.safetensors" --b_prefix after3. \
    --atol 3e-5 --complete 1 --where grad. --above 1e-3 2>&1); then
  pass "tied AdamW with optimizer offload: ${out##*compared }"
else fail "tied AdamW with optimizer offload: ${out:-run failed}"; tail -5 "$WORK/offload_opt.log"; fi

# --eod_mask_loss: no loss where the input is the end-of-document token (here token 73).
inputs=$(od -An -tu2 -v -j 1024 "$DATA/llama_gqa/tokens.bin" | tr -s ' ' '\n' | grep -v '^$' |
  awk '{ if ((NR - 1) % 17 != 16) n[$1]++ } END { print 64 - n[73] }')
"$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$DATA/llama_gqa" \
  --data "$DATA/llama_gqa/tokens.bin" --eval_data "$DATA/llama_gqa/tokens.bin" --context 16 --eod_mask_loss --eos_id 73 \
  > "$WORK/eod.log" 2>&1
if [ "$inputs" -lt 64 ] && grep -q "perplexity [0-9.]* ($inputs tokens)" "$WORK/eod.log"; then
  pass "--eod_mask_loss counts $inputs of 64 positions (those whose input is not token 73)"
else fail "--eod_mask_loss: expected $inputs counted positions: $(grep 'eval only' "$WORK/eod.log" || tail -2 "$WORK/eod.log")"; fi
# --doc_windows: windows stop at each document's end (token 73), so every token but a document's
# last is a target exactly once: counted = tokens − documents.
read -r tokens docs < <(od -An -tu2 -v -j 1024 "$DATA/llama_gqa/tokens.bin" | tr -s ' ' '\n' | grep -v '^$' |
  awk '{ n++; last = $1; if ($1 == 73) d++ } END { print n, d + (last != 73) }')
"$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$DATA/llama_gqa" \
  --data "$DATA/llama_gqa/tokens.bin" --eval_data "$DATA/llama_gqa/tokens.bin" --context 16 --doc_windows --eos_id 73 \
  > "$WORK/docs.log" 2>&1
want=$((tokens - docs))
if grep -q "windows end at end-of-document token 73" "$WORK/docs.log" &&
  grep -q "perplexity [0-9.]* ($want tokens)" "$WORK/docs.log"; then
  pass "--doc_windows: $docs documents, $want targets counted ($(grep -o '[0-9]* train / [0-9]* eval windows' "$WORK/docs.log"))"
else fail "--doc_windows: expected $want counted targets: $(grep -E 'eval only|windows' "$WORK/docs.log" | tail -2)"; fi
[ "$FAILED" = 0 ] && echo "hf_parity: all checks passed"
exit $FAILED
