#!/usr/bin/env bash
# ZeRO's memory savings, measured by the device's accounting (every allocation is counted by
# category) on a 16-layer gpt:
#  1. the measured peak of model states per rank (params + grads + optimizer state) for stages
#     0–3 on 1–4 ranks, fp32 and bf16, within 5% of the ZeRO paper's terms for this precision
#     (e = 4 or 2 bytes per parameter and gradient — without ZeRO, bf16 gradients accumulate in
#     bf16, as DeepSpeed 0.19 keeps them there — K = 8 bytes of Adam state, plus the 4-byte fp32
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
PSI_BIG=$("$RUNTIME" --model "$GPT" --describe_model -- --layers 4 --d_model 384 --heads 4 --context 32 --sample_chars 0 \
  2>/dev/null | sed -n 's/.*"total_params": \([0-9]*\).*/\1/p')

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
    p = (s == 3 ? e * part + e * big : e * psi); g = (s >= 2 ? e * part : e * psi); o = (s >= 1 ? k * part : k * psi)
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

# ---- 4. DeepSpeed's default buckets: each stage saves what it promises --------------------------
# A 7.2 M-parameter gpt (4 × 384: 29 MB fp32; context 32, micro-batch 1, so activations stay
# small beside the model states) on 2 ranks with DeepSpeed's default reduce/allgather buckets
# (5e8, larger than the model): stages 1 and 2 cut their reduce groups at 1/16 of the model, so
# the staging does not eat the partitioning's savings. Stage 3 keeps its default buckets but
# bounds what is gathered (stage3_max_live_parameters 1e6, stage3_max_reuse_distance 0: by
# default the whole model may be gathered at once, which its plan says) and stages one layer's
# gradients, not two (overlap_comm false: each of this model's 4 blocks is a quarter of it, and
# overlap's second staging buffer alone would be 2Ψ bytes). Checked: the measured total peak per
# rank falls 0 > 1 > 2 > 3; each stage's total stays within its theory (the ZeRO paper's model
# states) + 10% of stage 0's (stage 3: + the gathered parameters its plan lists); the plan
# printed at start equals the measured peak in every category to 0.05 MiB (stage 0's buffers
# measure 256 B above their plan), except stage 3's parameters, where the plan is a bound
# (ParamStore::gathered_bound) and the measured peak may be below it.
BIG=(-- --layers 4 --d_model 384 --heads 4 --context 32 --sample_chars 0)
defaults_config() {  # FILE STAGE
  local s3=''
  [ "$2" = 3 ] && s3=', "stage3_max_live_parameters": 1000000, "stage3_max_reuse_distance": 0, "overlap_comm": false'
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 1, "steps_per_print": 100, "zero_optimization": {"stage": $2$s3},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}
JSON
}
prev=""
for stage in 0 1 2 3; do
  log=$WORK/defaults$stage.log
  defaults_config "$WORK/defaults$stage.json" "$stage"
  if ! "$DSCPP" --num_procs 2 --master_port "$(port)" "$GPT" --deepspeed_config "$WORK/defaults$stage.json" --steps 2 \
    --no_eval "${BIG[@]}" > "$log" 2>&1; then
    fail "default buckets, stage $stage: $(tail -2 "$log")"; continue
  fi
  total=$(grep -m1 'memory peak per rank (bytes)' "$log" | sed -n 's/.*total=\([0-9]*\);.*/\1/p')
  # The plan's and the measured bytes per category: the table after the first step, rank 0.
  table=$(grep '^\[rank 0\]' "$log" | sed -n '/memory after the first step/,/^\[rank 0\] total/p')
  mismatch=""
  for c in params grads "optimizer state" activations buffers; do
    row=$(grep "\] $c  " <<< "$table" | head -1)
    planned=$(awk '{print $(NF-3), $(NF-2)}' <<< "$row") measured=$(awk '{print $(NF-1), $NF}' <<< "$row")
    # Stage 3's gathered parameters: planned as a bound.
    bound=0
    [ "$stage" = 3 ] && [ "$c" = params ] && bound=1
    [ -n "$row" ] && awk -v p="$planned" -v m="$measured" -v bound=$bound '
      function bytes(s,  f, u) {
        split(s, f, " "); u = 1
        if (f[2] == "KiB") u = 1024; else if (f[2] == "MiB") u = 2^20; else if (f[2] == "GiB") u = 2^30
        return f[1] * u
      }
      BEGIN { d = bytes(m) - bytes(p); exit !(d <= 0.05 * 2^20 && (bound || d >= -0.05 * 2^20)) }' && continue
    mismatch="$mismatch $c ($planned vs $measured)"
  done
  [ -z "$mismatch" ] && pass "default buckets, stage $stage: plan = measured peak in every category, to 0.05 MiB" ||
    fail "default buckets, stage $stage: plan and measured peak differ:$mismatch"
  # Theory: the paper's model states for fp32 Adam on 2 ranks (16Ψ, 8Ψ + 8Ψ/2, 4Ψ + 12Ψ/2, 16Ψ/2),
  # plus 10% of 16Ψ,
  # plus at stage 3 the gathered parameters its plan lists (formatted to 0.01 of its unit).
  gathered=0
  [ "$stage" = 3 ] && gathered=$(grep -m1 '^\[rank 0\]   params ' "$log" |
    awk '{u = $5 == "GiB" ? 1073741824 : $5 == "MiB" ? 1048576 : $5 == "KiB" ? 1024 : 1; printf "%d", ($4 + 0.005) * u}')
  limit=$(awk -v s="$stage" -v psi="$PSI_BIG" -v g="${gathered:-0}" 'BEGIN {
    t = s == 0 ? 16 * psi : s == 1 ? 8 * psi + 8 * psi / 2 : s == 2 ? 4 * psi + 12 * psi / 2 : 16 * psi / 2
    printf "%d", t + 1.6 * psi + g }')
  line="default buckets, stage $stage: total peak $total B, theory + 10% of stage 0's $limit B"
  if [ "$stage" = 0 ] || [ "$total" -le "$limit" ]; then pass "$line"; else fail "$line"; fi
  if [ -n "$prev" ]; then
    [ "$total" -lt "$prev" ] && pass "default buckets: stage $stage peaks below stage $((stage - 1)) ($total < $prev B)" ||
      fail "default buckets: stage $stage peaks at $total B, not below stage $((stage - 1))'s $prev B"
  fi
  prev=$total
done

[ "$FAILED" = 0 ] && echo "zero_memory: all checks passed"
exit "$FAILED"
