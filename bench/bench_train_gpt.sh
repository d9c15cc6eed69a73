#!/usr/bin/env bash
# Training throughput of the gpt example at the issue's reference shape (4 layers, d_model
# 256, 4 heads, context 128, micro-batch 16 sequences per rank, AdamW, fp32, fortunes text):
# tokens/s of dscpp at 1 rank × 2 threads and 2 ranks × 1 thread, against the same model in
# PyTorch (bench/torch_gpt.py: 1 process × 2 threads, and 2-process gloo DDP × 1 thread) in
# the same run. Both sides get the same OpenBLAS kernel setting (OPENBLAS_CORETYPE, default
# SkylakeX here; override with BENCH_CORETYPE) and OMP_WAIT_POLICY=PASSIVE.
# Usage: bench_train_gpt.sh DSCPP RUNTIME GPT_SO SOURCE_ROOT [STEPS]
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3 SRC=$4 STEPS=${5:-22}
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_gpt.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
 "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}}
JSON
rate() { grep -o 'tokens/s' "$1" > /dev/null && grep -o '[0-9.]* tokens/s' "$1" | tail -1 | awk '{print $1}'; }

echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE OMP_WAIT_POLICY=$OMP_WAIT_POLICY; $STEPS steps, the first 2 untimed"
"$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/ds.json" --steps "$STEPS" --threads 2 --no_eval \
  -- --sample_chars 0 > "$WORK/d1.log" 2>&1 || { tail -5 "$WORK/d1.log"; exit 1; }
grep -o 'OpenBLAS.*core [A-Za-z0-9]*' "$WORK/d1.log" | head -1 | sed 's/^/dscpp BLAS: /'
d1=$(rate "$WORK/d1.log")
"$DSCPP" --num_procs 2 --master_port $((20000 + RANDOM % 20000)) "$GPT" --deepspeed_config "$WORK/ds.json" \
  --steps "$STEPS" --threads 1 --no_eval -- --sample_chars 0 > "$WORK/d2.log" 2>&1 || { tail -5 "$WORK/d2.log"; exit 1; }
d2=$(rate "$WORK/d2.log")
echo "dscpp  1 rank  x 2 threads: ${d1} tokens/s"
echo "dscpp  2 ranks x 1 thread : ${d2} tokens/s"
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  T="$SRC/bench/torch_gpt.py"
  /usr/bin/python3 "$T" --throughput --threads 2 --batch 16 --steps $((STEPS - 2)) > "$WORK/t1.log" 2>&1 ||
    { tail -5 "$WORK/t1.log"; exit 1; }
  /usr/bin/python3 "$T" --throughput --ddp 2 --batch 16 --steps $((STEPS - 2)) > "$WORK/t2.log" 2>&1 ||
    { tail -5 "$WORK/t2.log"; exit 1; }
  head -1 "$WORK/t1.log" | sed 's/^/PyTorch: /'
  t1=$(grep -o '= [0-9.]* tokens/s' "$WORK/t1.log" | awk '{print $2}')
  t2=$(grep -o '= [0-9.]* tokens/s' "$WORK/t2.log" | awk '{print $2}')
  echo "torch  1 proc  x 2 threads: ${t1} tokens/s"
  echo "torch  2 procs x 1 thread (DDP): ${t2} tokens/s"
  awk -v a="$d1" -v b="$t1" -v c="$d2" -v d="$t2" 'BEGIN {
    printf "ratio dscpp/PyTorch: 1 rank %.2fx, 2 ranks %.2fx (target >= 1.5x)\n", a / b, c / d }'
else
  echo "PyTorch is not installed (apt-get install python3-torch): no baseline, no ratio"
fi
