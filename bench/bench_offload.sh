#!/usr/bin/env bash
# ZeRO-Infinity's optimizer swapping on the gpt example: ZeRO-3 on one rank with the optimizer
# in memory, offloaded to the host (offload_optimizer cpu) and swapped to NVMe (device nvme,
# synchronous and with pipeline_read + pipeline_write), the same model, batch and steps.
# Prints tokens/s of each beside the in-memory run, and for NVMe the share of step time spent
# blocked on swap I/O (the engine's "optimizer swap" line at steps_per_print) and the traffic.
# The runs alternate for BENCH_ROUNDS rounds (default 2); the machine is shared, so the numbers
# are indicative.
# Usage: bench_offload.sh RUNTIME GPT_SO [STEPS] [NVME_DIR]
set -u
RUNTIME=$1 GPT=$2 STEPS=${3:-12} NVME=${4:-/tmp}
ROUNDS=${BENCH_ROUNDS:-2}
export OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_offload.XXXXXX)
mkdir -p "$WORK/swap"
SWAP=$(mktemp -d "$NVME/dscpp_bench_swap.XXXXXX")
trap 'rm -rf "$WORK" "$SWAP"' EXIT
# 8 layers of d_model 256 (bench_train_gpt.sh's width, twice its depth), micro-batch 8; one
# sub-group per layer (sub_group_size 1: a stage-3 sub-group is at least one layer's partition),
# so NVMe swaps ten per step and pipelining's three cached sub-groups cannot hold them all.
config() {  # FILE OFFLOAD_JSON
  local off=""
  [ -n "$2" ] && off=", \"offload_optimizer\": $2"
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 8, "steps_per_print": $STEPS, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3, "sub_group_size": 1 $off},
 "aio": {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}}
JSON
}
config "$WORK/mem.json" ""
config "$WORK/cpu.json" '{"device": "cpu"}'
config "$WORK/nvme.json" "{\"device\": \"nvme\", \"nvme_path\": \"$SWAP\"}"
config "$WORK/pipe.json" "{\"device\": \"nvme\", \"nvme_path\": \"$SWAP\", \"pipeline_read\": true, \"pipeline_write\": true, \"buffer_count\": 9}"
rate() { grep 'after the first' "$1" | grep -o '[0-9.]* tokens/s' | tail -1 | awk '{print $1}'; }
swap() { grep -o 'optimizer swap (rank 0): .*' "$1" | tail -1 | sed 's/optimizer swap (rank 0): //'; }
echo "gpt 8 x 256, ZeRO-3, 1 rank, $STEPS steps (first 2 untimed), swap dir $SWAP ($(df -T "$SWAP" | awk 'NR == 2 {print $2}'));" \
  "$ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
  for c in mem cpu nvme pipe; do
    "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/$c.json" --steps "$STEPS" --threads 2 --no_eval \
      -- --layers 8 --sample_chars 0 > "$WORK/$c.log" 2>&1 || { tail -5 "$WORK/$c.log"; exit 1; }
  done
  m=$(rate "$WORK/mem.log")
  printf 'round %d: in memory %s tokens/s\n' "$r" "$m"
  for c in cpu nvme pipe; do
    x=$(rate "$WORK/$c.log")
    printf '  %-26s %8s tokens/s  = %s x in-memory  %s\n' \
      "$(case $c in cpu) echo "offload cpu" ;; nvme) echo "offload nvme" ;; pipe) echo "offload nvme, pipelined" ;; esac)" \
      "$x" "$(awk -v a="$x" -v b="$m" 'BEGIN {printf "%.2f", a / b}')" "$(swap "$WORK/$c.log")"
  done
done
grep -A12 'memory after the first step' "$WORK/pipe.log" | sed 's/^.*INFO[^]]*] //' | head -12
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
