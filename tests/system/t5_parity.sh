#!/usr/bin/env bash
# The T5 family (models/t5) against Hugging Face transformers, through the reference data of
# tests/data/hf/t5_v10 and t5_v11 (tiny random T5 v1.0 and v1.1 made by transformers 4.44.2;
# make_t5.py there), without Python:
#   1. forward: --eval_only gives transformers' loss for the 4 pairs padded into one batch, and
#      for the first pair alone;
#   2. backward: one SGD step of lr 1, exported with `dscpp export-hf`, is the weights minus
#      transformers' gradient: on 1 rank (micro-batch 4, the batch's loss) at ZeRO 0, on cuda-sim,
#      and on 2 ranks at ZeRO 1–3 (each rank's mean, averaged: transformers' gradient of that;
#      --no_shuffle, so that the pairs each rank gets are torch's DistributedSampler's), where each
#      rank's micro-batch is computed to its own longest pair, not the data's;
#   3. AdamW: 3 steps on 2 ranks at ZeRO 3 give transformers' losses and parameters;
#   4. export round trip: a step-0 checkpoint exported is the HF file again, names, shapes and
#      values, and config.json;
#   5. refusals: a malformed line and an over-long example name file and line;
#   6. generation: greedy and beam search (3 beams) of all sources at once equal transformers' generate;
#   7. --predict_with_generate: the eval line's BLEU and gen_len are sacreBLEU's for transformers' outputs.
# Tolerances as tests/system/hf_parity.sh's, relative for losses: 1e-6 + 4e-7 of the loss (v1.1's
# untied head starts at 14.5; measured ≤ 2.5e-6 at 14.5 in the sanitizer build, 2.3e-6 at 6.2),
# gradients normwise 1e-5 of the tensor's largest (measured ≤ 1.4e-6 absolute).
# Usage: t5_parity.sh DSCPP RUNTIME T5_SO COMPARE SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 T5=$3 COMPARE=$4 SRC=$5
DATA=$SRC/tests/data/hf
WORK=$(mktemp -d /tmp/dscpp_t5_parity.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }

# run MODEL RANKS CONFIG LOG [runtime args...] [-- plugin args]
run() {
  local m=$1 ranks=$2 cfg=$3 log=$4
  shift 4
  local args=(--deepspeed_config "$cfg" --no_shuffle "$@" -- --from_hf "$DATA/$m" --data "$DATA/$m/train.jsonl"
    --eval_data "${EVAL_DATA:-$DATA/$m/train.jsonl}")
  if [ "$ranks" = 1 ]; then "$RUNTIME" --model "$T5" "${args[@]}" > "$log" 2>&1
  else "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$T5" "${args[@]}" > "$log" 2>&1; fi
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
# A loss's tolerance: 1e-6 + 4e-7 of it (v1.1's untied head starts at 14.5).
ltol() { awk -v w="$1" 'BEGIN { print 1e-6 + 4e-7 * (w < 0 ? -w : w) }'; }
SGD='{"type": "SGD", "params": {"lr": 1.0, "momentum": 0, "weight_decay": 0}}'
ADAMW='{"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}}'

for m in t5_v10 t5_v11; do
  # 1. forward
  config "$WORK/eval.json" 0 4 "$SGD"
  for what in loss loss_pair0; do
    [ "$what" = loss_pair0 ] && EVAL_DATA=$DATA/$m/pair0.jsonl
    got=""
    run "$m" 1 "$WORK/eval.json" "$WORK/$m.$what.log" --eval_only &&
      got=$(sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$WORK/$m.$what.log")
    want=$(ref "$m" "$what")
    if [ -n "$got" ] && close "$got" "$want" "$(ltol "$want")"; then pass "$m forward ($what): loss $got, transformers $want"
    else fail "$m forward ($what): loss '$got', transformers $want"; tail -5 "$WORK/$m.$what.log"; fi
    unset EVAL_DATA
  done

  # 2. backward
  for c in 0:1:cpu 0:1:cuda-sim 1:2:cpu 2:2:cpu 3:2:cpu; do
    IFS=: read -r stage ranks device <<< "$c"
    tag="$m.sgd.s$stage.r$ranks.$device" prefix=grad.
    [ "$ranks" = 2 ] && prefix=grad_ranks.
    config "$WORK/$tag.json" "$stage" $((4 / ranks)) "$SGD"
    out=""
    if run "$m" "$ranks" "$WORK/$tag.json" "$WORK/$tag.log" --device "$device" --steps 1 --no_eval \
      --save_dir "$WORK/$tag.ckpt" && "$DSCPP" export-hf -q "$WORK/$tag.ckpt" "$WORK/$tag.hf" > "$WORK/$tag.x.log" 2>&1 &&
      out=$("$COMPARE" "$WORK/$tag.hf/model.safetensors" "$DATA/$m/reference.safetensors" --b_prefix "$prefix" \
        --minus_from "$DATA/$m/model.safetensors" --normwise 1 --rtol 1e-5 --complete 1 2>&1); then
      pass "$m gradients, ZeRO $stage on $ranks rank(s), $device: ${out##*compared }"
      # Two pairs a rank: rank 0's micro-batch is shorter than the data's longest pair, and is
      # computed so (the gradients above are transformers' for the batch padded to its own longest).
      if [ "$ranks" = 2 ]; then
        grep -q "micro-batches are padded to their own longest sample" "$WORK/$tag.log" &&
          pass "  ... each micro-batch computed to its own longest pair: $(grep -o 'the first computes .*' "$WORK/$tag.log")" ||
          fail "$m ZeRO $stage on 2 ranks: no micro-batch computed to its own longest pair"
      fi
    else fail "$m gradients, ZeRO $stage on $ranks rank(s), $device: ${out:-run or export failed}"
      tail -5 "$WORK/$tag.log" "$WORK/$tag.x.log"; fi
    rm -rf "$WORK/$tag.ckpt" "$WORK/$tag.hf"
  done

  # 3. AdamW, 3 steps on 2 ranks at ZeRO 3
  tag="$m.adamw"
  config "$WORK/$tag.json" 3 2 "$ADAMW"
  if run "$m" 2 "$WORK/$tag.json" "$WORK/$tag.log" --steps 3 --no_eval --save_dir "$WORK/$tag.ckpt" &&
    "$DSCPP" export-hf -q "$WORK/$tag.ckpt" "$WORK/$tag.hf" > "$WORK/$tag.x.log" 2>&1; then
    mapfile -t losses < <(tail -n +2 "$WORK/$tag"_csv/run/Train_Samples_train_loss.csv | cut -d, -f2)
    for k in 0 1 2; do
      want=$(ref "$m" "loss_step.$k")
      close "${losses[$k]:-nan}" "$want" "$(ltol "$want")" || fail "$tag step $((k + 1)) loss ${losses[$k]:-none}, transformers $want"
    done
    if out=$("$COMPARE" "$WORK/$tag.hf/model.safetensors" "$DATA/$m/reference.safetensors" --b_prefix after3. \
      --atol 3e-5 --complete 1 --where grad_ranks. --above 1e-3 2>&1); then
      pass "$m AdamW, ZeRO 3 on 2 ranks, losses ${losses[*]}: ${out##*compared }"
    else fail "$m AdamW, ZeRO 3 on 2 ranks: $out"; fi
  else fail "$tag: run or export"; tail -20 "$WORK/$tag.log" "$WORK/$tag.x.log"; fi

  # 4. export round trip
  config "$WORK/zero.json" 2 2 "$SGD"
  out=""
  if run "$m" 2 "$WORK/zero.json" "$WORK/$m.zero.log" --steps 0 --no_eval --save_dir "$WORK/$m.zero.ckpt" &&
    "$DSCPP" export-hf -q "$WORK/$m.zero.ckpt" "$WORK/$m.zero.hf" > "$WORK/$m.zero.x.log" 2>&1 &&
    out=$("$COMPARE" "$WORK/$m.zero.hf/model.safetensors" "$DATA/$m/model.safetensors" --complete 1 2>&1) &&
    cmp -s <(tr -d ' \n' < "$WORK/$m.zero.hf/config.json") <(tr -d ' \n' < "$DATA/$m/config.json"); then
    pass "$m export round trip: ${out##*compared }, config.json the same"
  else fail "$m export round trip: ${out:-run or export failed}"; tail -5 "$WORK/$m.zero.log" "$WORK/$m.zero.x.log"; fi
done

# 6. generation: the 4 sources decoded together, greedy and with 3 beams, give transformers' generate
#    (max_new_tokens 8) for each source alone; t5_v11's head makes some sequences end at eos.
for m in t5_v10 t5_v11; do
  sources=$(sed -e 's/.*"input_ids": \[\([0-9, ]*\)\].*/\1/' -e 's/ //g' "$DATA/$m/train.jsonl" | paste -sd';')
  for beams in 1 3; do
    what=greedy
    [ "$beams" = 3 ] && what=beam3
    mapfile -t got < <("$RUNTIME" --model "$T5" --generate --prompt_ids "$sources" --max_new_tokens 8 \
      --num_beams "$beams" --batch_size 4 -- --from_hf "$DATA/$m" 2> "$WORK/$m.$what.err" | sed -n 's/^ids: //p')
    bad=""
    for i in 0 1 2 3; do
      # transformers' output begins with the decoder start token; dscpp prints what follows it
      want=$(ref "$m" "$what.$i" | tail -n +2 | sed 's/\.0*$//' | paste -sd,)
      [ "${got[$i]:-none}" = "$want" ] || bad="$bad source $i: ${got[$i]:-none}, transformers $want;"
    done
    if [ -z "$bad" ]; then pass "$m $what generation of 4 sources together: ${got[*]}"
    else fail "$m $what generation:$bad"; tail -3 "$WORK/$m.$what.err"; fi
  done
done

# 7. evaluation with generation (--predict_with_generate): BLEU and mean length of the greedy
#    outputs against the labels as sacreBLEU scores them, on 1 rank and on 2 ranks at ZeRO 3 (each
#    rank generating for its share of the eval sources).
config "$WORK/eval2.json" 3 2 "$SGD"
for m in t5_v10 t5_v11; do
  want=$(ref "$m" bleu_greedy) wlen=$(ref "$m" gen_len_greedy)
  for ranks in 1 2; do
    cfg=$WORK/eval.json
    [ "$ranks" = 2 ] && cfg=$WORK/eval2.json
    line=""
    run "$m" "$ranks" "$cfg" "$WORK/$m.pwg$ranks.log" --eval_only --predict_with_generate --generation_max_length 8 &&
      line=$(grep -m1 -o 'bleu [0-9.]*, gen_len [0-9.]*' "$WORK/$m.pwg$ranks.log")
    got=$(echo "$line" | sed 's/bleu \([0-9.]*\),.*/\1/') glen=${line##* }
    if [ -n "$line" ] && close "$got" "$want" 0.006 && close "$glen" "$wlen" 0.006; then
      pass "$m predict_with_generate on $ranks rank(s): $line; sacreBLEU $want, gen_len $wlen"
    else fail "$m predict_with_generate on $ranks rank(s): '$line', sacreBLEU $want, gen_len $wlen"
      tail -3 "$WORK/$m.pwg$ranks.log"; fi
  done
done

# 5. refusals, naming file and line
config "$WORK/eval.json" 0 4 "$SGD"
printf '{"input_ids": [5, 1], "labels": [7, 1]}\n{"input_ids": [5, 1], "labels": \n' > "$WORK/broken.jsonl"
"$RUNTIME" --model "$T5" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$DATA/t5_v10" \
  --data "$WORK/broken.jsonl" > "$WORK/broken.log" 2>&1
if grep -q "broken.jsonl:2" "$WORK/broken.log"; then pass "a malformed line: $(grep -m1 -o 'broken.jsonl:2.*' "$WORK/broken.log")"
else fail "a malformed line is not named"; tail -3 "$WORK/broken.log"; fi
"$RUNTIME" --model "$T5" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$DATA/t5_v10" \
  --data "$DATA/t5_v10/train.jsonl" --max_source_length 8 > "$WORK/long.log" 2>&1
if grep -q "max_source_length" "$WORK/long.log" && ! grep -q "eval only" "$WORK/long.log"; then
  pass "an over-long source: $(grep -m1 -o 'train.jsonl.*' "$WORK/long.log")"
else fail "an over-long source is not refused"; tail -3 "$WORK/long.log"; fi

exit $FAILED
