#!/usr/bin/env bash
# ZeRO's memory savings, measured by the device's accounting (every allocation is counted by
# category) on a 16-layer gpt:
#  1. the measured peak of model states per rank (params + grads + optimizer state) for stages
#     0–3 on 1–4 ranks, fp32 and bf16, within 5% of the ZeRO paper's terms for this precision
#     (e = 4 or 2 bytes per parameter and gradient — gradients are fp32 for bf16 at stage 0, as
#     DeepSpeed's BF16_Optimizer keeps them — K = 8 bytes of Adam state, plus the 4-byte fp32
#     master for bf16), plus the one bounded extra that counts as parameters: the stage-3
#     layer being computed (prefetch, reuse and persistence are switched off here);
#  2. stage 3 on 4 ranks holds at most 1/3.5 of stage 0's model states;
#  3. under --device_memory_limit a model that does not fit at stage 0 fails with advice taken
#     from the same memory plan (another stage, CPU offload, or more ranks), and the first
#     setting it advises trains under the same limit (1 rank, and 2 ranks with a tighter limit).
# Usage: zero_memory.sh DSCPP RUNTIME GPT_SO
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3
WORK=$(mktemp -d /tmp/dscpp_zero_memory.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
GPT_ARGS=(-- --layers 16 --d_model 64 --heads 2 --context 32 --sample_chars 0)

desc=$("$RUNTIME" --model "$GPT" --describe_model "${GPT_ARGS[@]}" 2>/dev/null)
PSI=$(sed -n 's/.*"total_params": \([0-9]*\).*/\1/p' <<< "$desc")
LARGEST=$(sed -n 's/.*"largest_layer_params": \([0-9]*\).*/\1/p' <<< "$desc")
[ -n "$PSI" ] && [ -n "$LARGEST" ] || { echo "FAIL: --describe_model gave no counts: $desc"; exit 1; }
echo "model: Ψ = $PSI parameters, largest layer $LARGEST"

config() {  # FILE STAGE PRECISION_BLOCK
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 100,
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 60000, "stage3_prefetch_bucket_size": 0,
   "stage3_max_reuse_distance": 0, "stage3_param_persistence_threshold": 0},
 $3
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}
JSON
}
run() {  # RANKS CONFIG LOG [runtime args]
  local ranks=$1 cfg=$2 log=$3
  shift 3
  "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$GPT" --deepspeed_config "$cfg" --steps 2 --no_eval "$@" \
    "${GPT_ARGS[@]}" > "$log" 2>&1
}
peak() {  # LOG → measured model-state bytes of rank 0
  sed -n 's/.*memory peak per rank (bytes): params=\([0-9]*\), grads=\([0-9]*\), optimizer_state=\([0-9]*\),.*/\1 \2 \3/p' "$1" |
    awk '{print $1 + $2 + $3}'
}
# analytic STAGE RANKS E: the paper's terms with Ψ/N rounded up, plus the gathered layer at stage 3.
analytic() {
  awk -v s="$1" -v n="$2" -v e="$3" -v psi="$PSI" -v big="$LARGEST" 'BEGIN {
    k = 8 + (e == 2 ? 4 : 0); part = psi / n
    ge = (e == 2 && s == 0) ? 4 : e   # bf16 without ZeRO accumulates fp32 gradients (the BF16_Optimizer rule)
    p = (s == 3 ? e * part + e * big : e * psi); g = (s >= 2 ? ge * part : ge * psi); o = (s >= 1 ? k * part : k * psi)
    printf "%d", p + g + o }'
}

# Under the sanitizers (DSCPP_TEST_SANITIZED=1, slow processes) a diagonal of the matrix covers
# every stage and rank count once per precision; the numbers are the same either way.
wanted() {  # STAGE RANKS PREC
  [ "${DSCPP_TEST_SANITIZED:-0}" = 1 ] || return 0
  case "$3:$1:$2" in fp32:0:1 | fp32:1:2 | fp32:2:3 | fp32:3:4 | fp32:3:1 | bf16:0:2 | bf16:2:2 | bf16:3:4) return 0 ;; esac
  return 1
}
declare -A MEASURED
for prec in fp32 bf16; do
  block=''; e=4
  [ "$prec" = bf16 ] && { block='"bf16": {"enabled": true},'; e=2; }
  for stage in 0 1 2 3; do
    config "$WORK/s$stage$prec.json" "$stage" "$block"
    for ranks in 1 2 3 4; do
      [ "$prec" = bf16 ] && [ "$ranks" = 3 ] && continue  # bf16: 1, 2, 4 ranks keep the run short
      wanted "$stage" "$ranks" "$prec" || continue
      log=$WORK/m$stage-$ranks-$prec.log
      run "$ranks" "$WORK/s$stage$prec.json" "$log" || { fail "stage $stage, $ranks ranks, $prec: $(tail -2 "$log")"; continue; }
      got=$(peak "$log")
      want=$(analytic "$stage" "$ranks" "$e")
      MEASURED[$stage-$ranks-$prec]=$got
      dev=$(awk -v g="$got" -v w="$want" 'BEGIN {d = (g - w) / w; printf "%.4f", d < 0 ? -d : d}')
      line="stage $stage, $ranks rank(s), $prec: measured $got B, analytic $want B (off by $(awk -v d="$dev" 'BEGIN {printf "%.2f", 100 * d}')%)"
      awk -v d="$dev" 'BEGIN {exit !(d <= 0.05)}' && pass "$line" || fail "$line"
    done
  done
done
s0=${MEASURED[0-1-fp32]:-0} s3=${MEASURED[3-4-fp32]:-0}  # both in every mode
if [ "$s0" -gt 0 ] && [ "$s3" -gt 0 ]; then
  ratio=$(awk -v a="$s0" -v b="$s3" 'BEGIN {printf "%.2f", a / b}')
  awk -v r="$ratio" 'BEGIN {exit !(r >= 3.5)}' && pass "stage 3 on 4 ranks holds 1/$ratio of stage 0" ||
    fail "stage 3 on 4 ranks holds 1/$ratio of stage 0 (want ≤ 1/3.5)"
fi

# ---- 3. the out-of-memory advice, run -----------------------------------------------------
# Over the limit, the error suggests only settings its memory plan says fit; each first
# suggestion is then run under the same limit and must train. Stage 0 needs 16Ψ ≈ 13 MB of
# model states: at 0.7 of that one rank fits by offloading the optimizer; at a third of it two
# ranks fit only with parameters offloaded too; at 3.7 MiB one rank fits nothing, and the advice
# names a rank count.
# advice_runs NAME RANKS LIMIT: stage 0 on RANKS fails with advice whose first setting trains.
advice_runs() {
  local name=$1 ranks=$2 limit=$3 log=$WORK/$1.log s stage offload ranks_s
  config "$WORK/$name.json" 0 ''
  if run "$ranks" "$WORK/$name.json" "$log" --device_memory_limit "$limit"; then
    fail "$name: stage 0 on $ranks rank(s) fit under $limit bytes"
    return
  fi
  s=$(grep -o "these fit [^:]*: stage [0-3][^(]*on [0-9]* ranks\?" "$log" | head -1 | sed 's/.*: //')
  [ -z "$s" ] && s=$(grep -o "More ranks: stage [0-3][^(]*on [0-9]* ranks\?" "$log" | head -1 | sed 's/More ranks: //')
  if [ -z "$s" ] || ! grep -q "out of memory" "$log"; then
    fail "$name: no advice in: $(grep -m1 -A1 'out of memory' "$log" | tail -1 | cut -c1-300)"
    return
  fi
  stage=$(sed 's/stage \([0-3]\).*/\1/' <<< "$s")
  ranks_s=$(sed 's/.* on \([0-9]*\) rank.*/\1/' <<< "$s")
  offload=''
  grep -q "offload_optimizer cpu" <<< "$s" && offload='"offload_optimizer": {"device": "cpu"},'
  grep -q "offload_param" <<< "$s" && offload="$offload \"offload_param\": {\"device\": \"cpu\"},"
  cat > "$WORK/$name-advised.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 100,
 "zero_optimization": {"stage": $stage, $offload "reduce_bucket_size": 60000, "stage3_prefetch_bucket_size": 0,
   "stage3_max_reuse_distance": 0, "stage3_param_persistence_threshold": 0},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}
JSON
  run "$ranks_s" "$WORK/$name-advised.json" "$WORK/$name-advised.log" --device_memory_limit "$limit" &&
    pass "$name: stage 0 on $ranks rank(s) over $limit B advises '$s', which trains under the same limit" ||
    fail "$name: the advised '$s' failed under the same limit: $(grep -m1 -A1 'out of memory' "$WORK/$name-advised.log" |
      tail -1 | cut -c1-300)"
}
advice_runs oom-1rank 1 $((PSI * 16 * 7 / 10))
advice_runs oom-2ranks 2 $((PSI * 16 / 3))
# 3.7 MiB: between what all the offload plans on 1 rank (3.8 MiB) and on 2 ranks (3.6 MiB).
advice_runs oom-more-ranks 1 $((37 * 1048576 / 10))

[ "$FAILED" = 0 ] && echo "zero_memory: all checks passed"
exit "$FAILED"
