#!/usr/bin/env bash
# What each ZeRO stage costs in memory per rank against the ZeRO paper's theory, on a 101 M model:
# the gpt example at 8 layers × 1024, 16 heads, context 128, micro-batch 2 (101 M parameters), fp32
# AdamW, 2 ranks × 1 thread, 2 steps. Two configs: DeepSpeed's defaults (only the stage set;
# reduce/allgather buckets 5e8, overlap_comm off at stages 1–2 and on at 3,
# stage3_max_live_parameters and stage3_max_reuse_distance 1e9), and small buckets (2e6, as
# bench_zero_stages.sh). Per run: theory (fp32 Adam model states: 16Ψ, 12Ψ, 10Ψ, 8Ψ on 2 ranks;
# with the optimizer offloaded the device's 4Ψ of parameters), planned and measured total tracked
# device memory (the engine's accounting: model states, activations, buffers; the plan's total is
# the sum of its categories' peaks, which at stage 3 do not coincide), the buffers alone, the
# stage-3 gathered parameters the plan allows, the peak RSS (max over the launcher and its ranks,
# GNU time), and the target docs/zero-and-memory.md holds each stage to: tracked ≤ theory +
# gathered + 10% of stage 0's theory.
# Usage: bench_zero_memory.sh DSCPP GPT_SO
set -u
DSCPP=$1 GPT=$2
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_zero_memory.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=(--layers 8 --d_model 1024 --heads 16 --context 128 --sample_chars 0)
config() {  # FILE STAGE EXTRA_ZERO_KEYS
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 100, "zero_optimization": {"stage": $2$3},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0001}}}
JSON
}
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }
# A plan line's size ("  params            385.8 MiB …") in bytes.
item_bytes() {
  grep -m1 "^\[rank 0\]   $1 " "$2" |
    awk '{u = $5 == "GiB" ? 1073741824 : $5 == "MiB" ? 1048576 : $5 == "KiB" ? 1024 : 1; printf "%d", $4 * u}'
}
PSI=$("${DSCPP%/*}/../runtime/dscpp-runtime" --model "$GPT" --describe_model -- "${MODEL[@]}" 2> /dev/null |
  sed -n 's/.*"total_params": \([0-9]*\).*/\1/p')
[ -n "$PSI" ] || PSI=101136384
echo "gpt 8 × 1024, 16 heads, context 128, micro-batch 2: Ψ = $PSI parameters; fp32 AdamW, 2 ranks × 1 thread"
printf "%-14s %-10s %9s %9s %9s %9s %9s %9s %8s %s\n" config run theory planned tracked buffers gathered "peak RSS" \
  "÷theory" "target (MiB)"
for setting in defaults small; do
  extra=''
  [ "$setting" = small ] && extra=', "reduce_bucket_size": 2000000, "allgather_bucket_size": 2000000'
  for run in 0 1 2 3 2+offload; do
    stage=${run%%+*} keys=$extra
    [ "$run" = 2+offload ] && keys="$keys, \"offload_optimizer\": {\"device\": \"cpu\"}"
    config "$WORK/c.json" "$stage" "$keys"
    /usr/bin/time -f "maxrss_kib=%M" "$DSCPP" --num_procs 2 --master_port $((20000 + RANDOM % 20000)) "$GPT" \
      --deepspeed_config "$WORK/c.json" --steps 2 --no_eval --threads 1 -- "${MODEL[@]}" > "$WORK/r.log" 2>&1 ||
      { echo "FAIL: $setting stage $run: $(tail -3 "$WORK/r.log")"; exit 1; }
    line=$(grep -m1 '^\[rank 0\].*memory peak per rank (bytes)' "$WORK/r.log")
    tracked=$(sed -n 's/.*total=\([0-9]*\);.*/\1/p' <<< "$line")
    buffers=$(sed -n 's/.*buffers=\([0-9]*\),.*/\1/p' <<< "$line")
    planned=$(sed -n 's/.*planned total=\([0-9]*\),.*/\1/p' <<< "$line")
    rss=$(sed -n 's/^maxrss_kib=\([0-9]*\)/\1/p' "$WORK/r.log")
    gathered=0
    [ "$stage" = 3 ] && gathered=$(item_bytes params "$WORK/r.log")
    # The offloaded optimizer's state and gradients are host memory: the device holds 4Ψ + ….
    theory=$(awk -v s="$stage" -v p="$PSI" 'BEGIN {printf "%d", (s == 0 ? 16 : s == 1 ? 12 : s == 2 ? 10 : 8) * p}')
    [ "$run" = 2+offload ] && theory=$((4 * PSI))
    target=$(awk -v t="$theory" -v g="$gathered" -v p="$PSI" 'BEGIN {printf "%d", t + g + 1.6 * p}')
    verdict="≤ $(mib "$target"): met"
    [ "$tracked" -le "$target" ] || verdict="≤ $(mib "$target"): NOT met"
    [ "$stage" = 0 ] && verdict="(stage 0: the reference)"
    printf "%-14s %-10s %9s %9s %9s %9s %9s %9s %8s %s\n" "$setting" "stage $run" "$(mib "$theory")" \
      "$(mib "$planned")" "$(mib "$tracked")" "$(mib "$buffers")" "$(mib "$gathered")" "$((rss / 1024))" \
      "$(awk -v a="$tracked" -v b="$theory" 'BEGIN {printf "%.2f", a / b}')" "$verdict"
  done
done
echo "(MiB per rank; tracked: the device accounting's peak total; peak RSS: the largest process's)"
