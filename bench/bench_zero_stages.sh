#!/usr/bin/env bash
# What ZeRO costs and saves on the gpt example at the reference shape (4 layers, d_model 256,
# 4 heads, context 128, micro-batch 16 per rank, AdamW), 2 ranks × 1 thread: tokens/s and the
# measured peak device memory (model states and total) for stages 0–3, fp32 and bf16, each
# against stage 0 of the same precision measured in the same run.
# Usage: bench_zero_stages.sh DSCPP GPT_SO [STEPS]
set -u
DSCPP=$1 GPT=$2 STEPS=${3:-12}
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_zero.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
config() {  # FILE STAGE PRECISION_BLOCK
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 1000, "gradient_clipping": 1.0, $3
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 2000000, "stage3_prefetch_bucket_size": 2000000,
   "stage3_max_reuse_distance": 0, "stage3_param_persistence_threshold": 10000},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}}
JSON
}
field() { sed -n "s/.*memory peak per rank (bytes):.*$1=\([0-9]*\).*/\1/p" "$2"; }
echo "gpt 4×256, context 128, micro-batch 16, 2 ranks × 1 thread, $STEPS steps (first 2 untimed); OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
printf "%-6s %-6s %12s %9s %16s %9s %14s %9s\n" precision stage tokens/s "÷stage0" "model states MiB" "÷stage0" "total MiB" "÷stage0"
for prec in fp32 bf16; do
  block=''
  [ "$prec" = bf16 ] && block='"bf16": {"enabled": true},'
  base_rate='' base_states='' base_total=''
  for stage in 0 1 2 3; do
    config "$WORK/s.json" "$stage" "$block"
    "$DSCPP" --num_procs 2 --master_port $((20000 + RANDOM % 20000)) "$GPT" --deepspeed_config "$WORK/s.json" \
      --steps "$STEPS" --threads 1 --no_eval -- --sample_chars 0 > "$WORK/r.log" 2>&1 || { tail -5 "$WORK/r.log"; exit 1; }
    rate=$(grep -o '[0-9.]* tokens/s' "$WORK/r.log" | tail -1 | awk '{print $1}')
    states=$(( $(field params "$WORK/r.log") + $(field grads "$WORK/r.log") + $(field optimizer_state "$WORK/r.log") ))
    total=$(sed -n 's/.*total=\([0-9]*\);.*/\1/p' "$WORK/r.log")
    [ -z "$base_rate" ] && { base_rate=$rate; base_states=$states; base_total=$total; }
    awk -v p="$prec" -v s="$stage" -v r="$rate" -v br="$base_rate" -v m="$states" -v bm="$base_states" -v t="$total" -v bt="$base_total" \
      'BEGIN {printf "%-9s %-5s %12.0f %9.2f %16.2f %9.2f %14.2f %9.2f\n", p, s, r, r / br, m / 1048576, m / bm, t / 1048576, t / bt}'
  done
done
