#!/usr/bin/env bash
# Parameter offload on the gpt example, ZeRO-3 on 2 ranks: the parameter partitions on the device
# (baseline), in host memory (offload_param cpu) and swapped to NVMe (offload_param nvme,
# max_in_cpu 0 so every block's slice is swapped), the same model, batch and steps. Prints
# training tokens/s and ZeRO-Inference (--eval_only) seconds of each beside the baseline, with
# the device's parameter peak (what offload saves). The runs alternate for BENCH_ROUNDS rounds
# (default 2); the machine is shared, so the numbers are indicative.
# Usage: bench_offload_param.sh DSCPP GPT_SO [STEPS] [NVME_DIR]
set -u
DSCPP=$1 GPT=$2 STEPS=${3:-12} NVME=${4:-/tmp}
ROUNDS=${BENCH_ROUNDS:-2}
export OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_offload_param.XXXXXX)
SWAP=$(mktemp -d "$NVME/dscpp_bench_swap.XXXXXX")
trap 'rm -rf "$WORK" "$SWAP"' EXIT
# 4 blocks of d_model 256 (bench_train_gpt.sh's shape): a block's fp32 slice over 2 ranks is
# 1.5 MiB, above the 1 MiB swap minimum. Default prefetch (5e7 elements): the whole model may
# be gathered ahead, so NVMe reads overlap compute.
# Training reads the whole text; 60 kB of it keeps the eval split (10%, ~90 windows) short.
cat /usr/share/games/fortunes/* 2> /dev/null | head -c 60000 > "$WORK/text.txt"
DATA=()
[ -s "$WORK/text.txt" ] && DATA=(--data "$WORK/text.txt")
GPT_ARGS=(-- --layers 4 --d_model 256 --heads 4 --context 64 --sample_chars 0 "${DATA[@]}")
config() {  # FILE OFFLOAD_JSON
  local off=""
  [ -n "$2" ] && off=", \"offload_param\": $2"
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 4, "steps_per_print": $STEPS,
 "zero_optimization": {"stage": 3 $off},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}}
JSON
}
config "$WORK/dev.json" ""
config "$WORK/cpu.json" '{"device": "cpu"}'
config "$WORK/nvme.json" "{\"device\": \"nvme\", \"nvme_path\": \"$SWAP\", \"max_in_cpu\": 0}"
run() { "$DSCPP" --num_procs 2 --master_port $((20000 + RANDOM % 20000)) "$GPT" --deepspeed_config "$1" "${@:3}" \
  "${GPT_ARGS[@]}" > "$2" 2>&1 || { tail -5 "$2"; exit 1; }; }
rate() { grep 'after the first' "$1" | grep -o '[0-9.]* tokens/s' | tail -1 | awk '{print $1}'; }
secs() { sed -n 's/.*eval only: .* in \([0-9.]*\) s,.*/\1/p' "$1"; }
ppeak() { sed -n 's/.*memory peak per rank (bytes): params=\([0-9]*\),.*/\1/p' "$1"; }
echo "gpt 4 x 256, context 64, ZeRO-3, 2 ranks, micro-batch 4, $STEPS steps (first 2 untimed), swap dir $SWAP" \
  "($(df -T "$SWAP" | awk 'NR == 2 {print $2}')); $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
  for c in dev cpu nvme; do
    run "$WORK/$c.json" "$WORK/$c.log" --steps "$STEPS" --no_eval --save_dir "$WORK/ckpt-$c"
    run "$WORK/$c.json" "$WORK/$c-eval.log" --eval_only --load_dir "$WORK/ckpt-dev"
  done
  d=$(rate "$WORK/dev.log") de=$(secs "$WORK/dev-eval.log")
  printf 'round %d: parameters on the device: %s tokens/s, eval %s s, device params peak %s B (eval %s B)\n' \
    "$r" "$d" "$de" "$(ppeak "$WORK/dev.log")" "$(ppeak "$WORK/dev-eval.log")"
  for c in cpu nvme; do
    x=$(rate "$WORK/$c.log") xe=$(secs "$WORK/$c-eval.log")
    printf '  offload_param %-4s %8s tokens/s = %s x baseline; eval %s s = %s x; device params peak %s B (eval %s B)\n' \
      "$c" "$x" "$(awk -v a="$x" -v b="$d" 'BEGIN {printf "%.2f", a / b}')" "$xe" \
      "$(awk -v a="$xe" -v b="$de" 'BEGIN {printf "%.2f", a / b}')" "$(ppeak "$WORK/$c.log")" "$(ppeak "$WORK/$c-eval.log")"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
