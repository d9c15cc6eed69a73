#!/usr/bin/env bash
# What each ZeRO++ switch sends and costs at stage 3 on 4 ranks laid out as 2 nodes of 2
# (DSCPP_RANKS_PER_NODE=2: hierarchical communication, as on two hosts): per step, the bytes
# rank 0 put on the wire in the world group (parameter allgathers, gradient reduce-scatters),
# in the hpZ groups (inside a node) and in qgZ's node and cross-node groups, and tokens/s, each
# against stage 3 without ZeRO++ measured in the same run. gpt 4 layers × d_model 256, context
# 128, micro-batch 4 per rank, fp32, every layer gathered for every use. On this 2-core machine
# 4 ranks share 2 cores, so tokens/s mostly reflects the CPU spent on quantization, not the
# network time ZeRO++ saves across real hosts.
# Usage: bench_zeropp.sh DSCPP GPT_SO [STEPS]
set -u
DSCPP=$1 GPT=$2 STEPS=${3:-8}
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_zeropp.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
config() {  # FILE EXTRA_ZERO_KEYS
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0 $2},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}}
JSON
}
# sent LOG GROUP: rank 0's wire bytes over the whole run in that group (world, hpz, qgz-node, qgz-cross).
sent() {
  local pat='info: communication (rank 0'
  [ "$2" != world ] && pat="info: $2 group communication"
  grep "$pat" "$1" | head -1 | sed -n 's/.*wire_bytes=\([0-9]*\) sent.*/\1/p' | grep . || echo 0
}
echo "gpt 4x256, context 128, micro-batch 4, stage 3, 4 ranks as 2 nodes x 2, $STEPS steps; MB sent per step by rank 0"
printf "%-14s %10s %10s %10s %10s %10s %8s %10s %8s\n" switch world hpZ qgz-node qgz-cross total "÷none" tokens/s "÷none"
base_total='' base_rate=''
for row in "none|" "qwZ|, \"zero_quantized_weights\": true" "hpZ|, \"zero_hpz_partition_size\": 2" \
  "qgZ|, \"zero_quantized_gradients\": true" \
  "all three|, \"zero_quantized_weights\": true, \"zero_hpz_partition_size\": 2, \"zero_quantized_gradients\": true"; do
  name=${row%%|*} keys=${row#*|}
  config "$WORK/z.json" "$keys"
  DSCPP_RANKS_PER_NODE=2 "$DSCPP" --num_procs 4 --master_port $((20000 + RANDOM % 12000)) "$GPT" \
    --deepspeed_config "$WORK/z.json" --steps "$STEPS" --threads 1 --no_eval -- --sample_chars 0 > "$WORK/r.log" 2>&1 ||
    { tail -5 "$WORK/r.log"; exit 1; }
  rate=$(grep -o 'after the first.*' "$WORK/r.log" | grep -o '[0-9.]* tokens/s' | awk '{print $1}')
  w=$(sent "$WORK/r.log" world) h=$(sent "$WORK/r.log" hpz) n=$(sent "$WORK/r.log" qgz-node) c=$(sent "$WORK/r.log" qgz-cross)
  total=$((w + h + n + c))
  [ -z "$base_total" ] && { base_total=$total; base_rate=$rate; }
  awk -v s="$name" -v w="$w" -v h="$h" -v n="$n" -v c="$c" -v t="$total" -v bt="$base_total" -v r="$rate" -v br="$base_rate" \
    -v k="$STEPS" 'BEGIN {m = 1048576 * k; printf "%-14s %10.2f %10.2f %10.2f %10.2f %10.2f %8.3f %10.0f %8.2f\n",
      s, w / m, h / m, n / m, c / m, t / m, t / bt, r, r / br}'
done
echo "(bytes include the final report's gathers; ÷none compares the whole run's bytes)"
