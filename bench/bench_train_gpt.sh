#!/usr/bin/env bash
# Training throughput of the gpt example at the reference shape (4 layers, d_model
# 256, 4 heads, context 128, micro-batch 16 sequences per rank, AdamW, fp32, fortunes text):
# tokens/s of dscpp at 1 rank × 2 threads and 2 ranks × 1 thread, against the same model in
# PyTorch (bench/torch_gpt.py: 1 process × 2 threads, and 2-process gloo DDP × 1 thread).
# Both sides get the same OpenBLAS kernel setting (OPENBLAS_CORETYPE, default SkylakeX here;
# override with BENCH_CORETYPE) and OMP_WAIT_POLICY=PASSIVE; dscpp's log line says which fp32
# GEMM it ran (its own AVX-512 kernel where the CPU has one, else OpenBLAS; DSCPP_GEMM=openblas
# forces OpenBLAS).
#
# The machine is shared, so the four runs alternate for BENCH_ROUNDS rounds (default 3) and
# the ratios reported are the medians of the per-round ratios; the load average is printed
# before and after. Besides each run's mean rate it compares each run's fastest step (dscpp
# logs every step; torch_gpt.py prints its best step), the least disturbed figure when other
# jobs share the cores.
#
# Measured 2026-11-24 on the 2-core Xeon @ 2.8 GHz (AVX-512), medians of per-round ratios:
#   OpenBLAS GEMMs, unfused attention (before):     1 rank 1.38x, 2 ranks 1.34x
#   dscpp AVX-512 GEMM + fused attention/linear ops, 5 rounds, load average 0.7 → 2.0:
#     1 rank 6658 vs 3945 tokens/s = 1.69x; 2 ranks 7424 vs 5074 tokens/s = 1.41x
#     (per-round 2-rank ratios 1.36–1.51; a 3-round run just before gave 1.61x / 1.52x)
#   same build, BENCH_RT=1 while two builds ran on the machine, 2 and 5 rounds:
#     1 rank 1.80x / 1.90x; 2 ranks 1.57x / 1.54x (5-round run: 8608 vs 5694 tokens/s,
#     per-round 2-rank ratios 1.42–1.79)
#   after the grad-norm fix (sum_squares, ~2.5 ms per step), BENCH_RT=1, idle machine, 3 and 5
#     rounds: 1 rank 1.84x / 1.93x; 2 ranks 1.52x / 1.53x (7798 vs 5124 and 7737 vs 5090
#     tokens/s; per-round 2-rank ratios 1.49–1.87 / 1.36–1.54). Before it, same day: 1.86x / 1.47x.
#   2026-11-25, after the in-place micro-kernel's k loop went to assembly (+4.5% on those GEMMs),
#     BENCH_RT=1, 3 / 5 / 7 rounds: 1 rank 2.04x / 1.75x / 1.84x; 2 ranks 1.62x / 1.51x / 1.41x
#     (8514 vs 5404, 8202 vs 5798, 8670 vs 6268 tokens/s; per-round 2-rank ratios 1.58–1.64 /
#     1.26–1.71 / 1.30–1.69). Torch DDP's own median moved from 5404 to 6268 within the hour.
#   Where 2-rank scaling goes: two independent 1-rank runs side by side (taskset, one per core)
#     each ran 5–15% slower than one alone, and their sum (7.6k–8.0k tokens/s) is the 2-rank
#     figure; allreduce is ~5 ms of a ~530 ms step. The loss is shared-cache/memory contention.
#   2026-11-25, another machine of the same kind: 2-core AMD EPYC (Zen 4: AVX-512 on 256-bit
#     units, FMA peak 116-117 GFLOP/s per core, the same with 256-bit FMAs). There OpenBLAS's
#     SkylakeX kernel runs the gpt GEMMs at 82% of that peak and dscpp's at 88% (bench_gemm:
#     96.3 against 102.9 GFLOP/s), so the GEMM lead that carried the ratios above is 1.07x.
#     BENCH_RT=1, 5 rounds each: after the C-tile prefetch, 1 rank 8134 vs 5318 tokens/s = 1.56x,
#     2 ranks 8400 vs 6632 = 1.27x; after the 4 KiB-stride panel copy as well (bench_gemm 104.7
#     GFLOP/s, 89% of the peak), 1 rank 8410 vs 5212 = 1.57x, 2 ranks 8614 vs 6530 = 1.31x
#     (per-round 1.20-1.34x; torch DDP steady at 6458-6557). In the FLOP accounting this script
#     prints (20.7 MFLOP per token), that last run had dscpp's 2 ranks at 76% of the FMA peak over
#     the whole step and torch DDP at 58%; 1.5x torch DDP takes 86%, nearly what dscpp's GEMMs
#     reach on their own (89%), as if nothing else were in the step.
# BENCH_RT=1 (root) runs everything at real-time round-robin priority (chrt -r 50): other jobs
# on a shared machine wait while a run holds the cores. Both sides get the same treatment.
# Usage: bench_train_gpt.sh DSCPP RUNTIME GPT_SO SOURCE_ROOT [STEPS]
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3 SRC=$4 STEPS=${5:-22}
ROUNDS=${BENCH_ROUNDS:-3}
if [ "${BENCH_RT:-0}" = 1 ] && [ -z "${BENCH_RT_ACTIVE:-}" ]; then
  BENCH_RT_ACTIVE=1 exec chrt -r 50 bash "$0" "$@"
fi
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_gpt.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MICRO=16 CTX=128  # sequences per rank per step; the gpt plugin's default context
cat > "$WORK/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": $MICRO, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}}
JSON
dscpp_rate() { grep 'after the first' "$1" | grep -o '[0-9.]* tokens/s' | tail -1 | awk '{print $1}'; }
# The fastest of the timed steps (step 3 on), from the per-step log lines.
dscpp_best() { grep -o 'step [0-9]*/[0-9]* .*| [0-9.]* tokens/s' "$1" | awk '{split($2, s, "/"); if (s[1] > 2) print $(NF-1)}' | sort -g | tail -1; }
torch_rate() { grep -o '^throughput: .*= [0-9.]* tokens/s' "$1" | grep -o '= [0-9.]* tokens/s' | awk '{print $2}'; }
torch_best() { grep -o '^best step: .*= [0-9.]* tokens/s' "$1" | grep -o '= [0-9.]* tokens/s' | awk '{print $2}'; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

HAVE_TORCH=0
/usr/bin/python3 -c "import torch" 2> /dev/null && HAVE_TORCH=1
T="$SRC/bench/torch_gpt.py"
echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE OMP_WAIT_POLICY=$OMP_WAIT_POLICY; $STEPS steps per run, the first 2 untimed;" \
  "$ROUNDS rounds; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
  "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/ds.json" --steps "$STEPS" --threads 2 --no_eval \
    -- --sample_chars 0 > "$WORK/d1.log" 2>&1 || { tail -5 "$WORK/d1.log"; exit 1; }
  if [ "$r" = 1 ]; then
    grep -o 'OpenBLAS.*core [A-Za-z0-9]*' "$WORK/d1.log" | head -1 | sed 's/^/dscpp BLAS: /'
    grep -o 'fp32 GEMM: .*' "$WORK/d1.log" | head -1 | sed 's/^/dscpp /'
  fi
  d1=$(dscpp_rate "$WORK/d1.log") d1b=$(dscpp_best "$WORK/d1.log")
  t1= t1b=
  if [ "$HAVE_TORCH" = 1 ]; then
    /usr/bin/python3 "$T" --throughput --threads 2 --batch "$MICRO" --steps $((STEPS - 2)) > "$WORK/t1.log" 2>&1 ||
      { tail -5 "$WORK/t1.log"; exit 1; }
    [ "$r" = 1 ] && head -1 "$WORK/t1.log" | sed 's/^/PyTorch: /'
    t1=$(torch_rate "$WORK/t1.log") t1b=$(torch_best "$WORK/t1.log")
  fi
  "$DSCPP" --num_procs 2 --master_port $((20000 + RANDOM % 20000)) "$GPT" --deepspeed_config "$WORK/ds.json" \
    --steps "$STEPS" --threads 1 --no_eval -- --sample_chars 0 > "$WORK/d2.log" 2>&1 || { tail -5 "$WORK/d2.log"; exit 1; }
  d2=$(dscpp_rate "$WORK/d2.log") d2b=$(dscpp_best "$WORK/d2.log")
  t2= t2b=
  if [ "$HAVE_TORCH" = 1 ]; then
    /usr/bin/python3 "$T" --throughput --ddp 2 --batch "$MICRO" --steps $((STEPS - 2)) > "$WORK/t2.log" 2>&1 ||
      { tail -5 "$WORK/t2.log"; exit 1; }
    t2=$(torch_rate "$WORK/t2.log") t2b=$(torch_best "$WORK/t2.log")
  fi
  echo "round $r: dscpp 1 rank x 2 threads ${d1} tokens/s (best step ${d1b}), torch 1 proc x 2 threads" \
    "${t1:-n/a} (best ${t1b:-n/a}); dscpp 2 ranks x 1 thread ${d2} (best ${d2b}), torch DDP 2 procs x 1 thread" \
    "${t2:-n/a} (best ${t2b:-n/a})"
  echo "$d1 ${t1:-0} $d2 ${t2:-0} $d1b ${t1b:-0} $d2b ${t2b:-0}" >> "$WORK/rounds"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
med_d1=$(awk '{print $1}' "$WORK/rounds" | median) med_t1=$(awk '{print $2}' "$WORK/rounds" | median)
med_d2=$(awk '{print $3}' "$WORK/rounds" | median) med_t2=$(awk '{print $4}' "$WORK/rounds" | median)
echo "dscpp  1 rank  x 2 threads: median $med_d1 tokens/s"
echo "dscpp  2 ranks x 1 thread : median $med_d2 tokens/s"
if [ "$HAVE_TORCH" = 1 ]; then
  echo "torch  1 proc  x 2 threads: median $med_t1 tokens/s"
  echo "torch  2 procs x 1 thread (DDP): median $med_t2 tokens/s"
  r1=$(awk '{print $1 / $2}' "$WORK/rounds" | median)
  r2=$(awk '{print $3 / $4}' "$WORK/rounds" | median)
  b1=$(awk '{print $5 / $6}' "$WORK/rounds" | median)
  b2=$(awk '{print $7 / $8}' "$WORK/rounds" | median)
  awk -v a="$b1" -v b="$b2" 'BEGIN {
    printf "ratio of best steps (median of per-round ratios): 1 rank %.2fx, 2 ranks %.2fx\n", a, b }'
  awk '{print $3 / $4}' "$WORK/rounds" | sort -g | awk '{v[NR] = $1} END {
    printf "per-round 2-rank ratios: %.2fx to %.2fx\n", v[1], v[NR] }'
  awk -v a="$r1" -v b="$r2" 'BEGIN {
    printf "ratio dscpp/PyTorch (median of per-round ratios): 1 rank %.2fx, 2 ranks %.2fx (target >= 1.5x)\n", a, b }'
else
  echo "PyTorch is not installed (apt-get install python3-torch): no baseline, no ratio"
fi
# The ratio in FLOPs: the model's FLOPs per token from dscpp's flops profiler (3 × forward,
# the count DeepSpeed's profiler uses; the same model, so the same count for torch), and each
# median as GFLOP/s per core against the core's FMA peak (bench_gemm --peak), the ceiling for
# fp32 training on this CPU.
GEMM_BENCH=${BENCH_GEMM:-$(dirname "$RUNTIME")/../bench/bench_gemm}
# The timed runs' config plus the profiler (its last line ends the top-level object).
sed '$ s/}$/, "flops_profiler": {"enabled": true, "profile_step": 2}}/' "$WORK/ds.json" > "$WORK/flops.json"
if [ -x "$GEMM_BENCH" ] && "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/flops.json" --steps 2 --threads 1 \
  --no_eval -- --sample_chars 0 > "$WORK/flops.log" 2>&1; then
  fwd=$(grep -o 'fwd flops per rank: *[0-9.]* [KMGT]' "$WORK/flops.log" | awk '{
    m = $NF == "K" ? 1e3 : $NF == "M" ? 1e6 : $NF == "G" ? 1e9 : 1e12; print $(NF-1) * m }')
  peak=$("$GEMM_BENCH" --peak | grep -o '[0-9.]* GFLOP/s' | awk '{print $1}')
  awk -v fwd="$fwd" -v peak="$peak" -v tokens=$((MICRO * CTX)) -v d1="$med_d1" -v d2="$med_d2" -v t1="$med_t1" \
    -v t2="$med_t2" -v torch="$HAVE_TORCH" 'BEGIN {
    f = 3 * fwd / tokens
    printf "model FLOPs per token (flops profiler, 3 x forward): %.2f M; FMA peak of one core: %.1f GFLOP/s\n", f / 1e6, peak
    row("dscpp  1 rank  x 2 threads", d1)
    row("dscpp  2 ranks x 1 thread ", d2)
    if (torch) {
      row("torch  1 proc  x 2 threads", t1)
      row("torch  2 procs x 1 thread ", t2)
      row("1.5 x torch DDP (the target)", 1.5 * t2)
    }
  }
  function row(what, rate) {
    printf "  %-30s %6.1f GFLOP/s per core, %3.0f%% of the FMA peak\n", what, rate * f / 2 / 1e9, 100 * rate * f / 2 / 1e9 / peak
  }'
else
  echo "no FLOP accounting: $GEMM_BENCH is missing or the flops-profiler run failed"
fi
