#!/usr/bin/env bash
# GPU training throughput of the gpt example at the shape of the first GPU measurements (12
# layers x 768, 12 heads, context 1024, micro-batch 8, AdamW, one rank, fortunes text) against
# the same model in PyTorch eager on the same GPU, in one run, alternating:
#   dscpp fp32 (exact fp32 GEMMs, fp32 attention without T² scores), ZeRO stage 0, with the
#   CUDA table's two attention paths: blockwise (the default) and tiled (DSCPP_FLASH_ATTENTION=tiled)
#   dscpp bf16 (16-bit compute: activations, GEMMs and ops in bf16), ZeRO stages 0, 1, 2 and 3,
#   and at stage 0 with DSCPP_COMPUTE_DTYPE=fp32 (fp32 activations, GEMM operands cast to bf16:
#   the path before 16-bit compute, for the before/after in one run)
#   torch fp32 + scaled_dot_product_attention (no TF32), torch bf16 autocast + SDPA
# Each run prints tokens/s over its timed steps (dscpp: after its 2 untimed steps; torch: after
# --warmup 2), its peak memory (dscpp: the engine's peak of device allocations plus the ops
# table's scratch peak; torch: torch.cuda.max_memory_allocated) and its MFU: model FLOPs per token (PaLM's count: 6·N for
# the weights plus 12·layers·d_model·context for attention, the whole T² as torch's SDPA is
# counted) × tokens/s over the GPU's dense peak (fp32 SIMT for the fp32 runs, bf16 tensor cores
# for bf16; by GPU name, or BENCH_PEAK_FP32 / BENCH_PEAK_BF16 in TFLOP/s).
# Then the ratios the targets are stated in: dscpp/torch at fp32 and bf16 (targets >= 1.0),
# peak memory dscpp/torch (<= 1.0), ZeRO stages 1-3 over stage 0 (>= 0.9 each), and from two
# more dscpp runs with the flops profiler (device-synchronous per layer) backward/forward per
# transformer block (<= 2.5).
# Usage: bench_train_gpt_gpu.sh [BUILD_DIR]
#   BENCH_STEPS (default 15 per run, 2 of them untimed), BENCH_ROUNDS (default 3, medians over
#   rounds: PyTorch's bf16 rate moved between 301k and 406k tokens/s from round to round on an
#   H200), PYTHON (default python3: a torch 2.x with CUDA), BENCH_SHAPE (gpt plugin arguments,
#   default the shape above; micro-batch BENCH_MICRO, default 8), BENCH_DEVICE (dscpp's --device,
#   default cuda; cuda-sim with a small BENCH_SHAPE and a stand-in nvidia-smi is a dry run of
#   this script's plumbing where there is no GPU), BENCH_RUN_LIMIT (seconds per run, default 150).
# On a GPU machine: bash tests/gpu/pack.sh BUNDLER here (see its usage), copy .gpu/ there, then
#   bash .gpu/on-device.sh bash bench/bench_train_gpt_gpu.sh
# Without a GPU it says so and exits 77.
set -u
BUILD=${1:-build}
RUNTIME=${RUNTIME:-$BUILD/runtime/dscpp-runtime}
GPT=${GPT:-$BUILD/examples/gpt/libgpt.so}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${BENCH_STEPS:-15} ROUNDS=${BENCH_ROUNDS:-3} PYTHON=${PYTHON:-python3}
MICRO=${BENCH_MICRO:-8} DEVICE=${BENCH_DEVICE:-cuda} LIMIT=${BENCH_RUN_LIMIT:-150}
read -r -a SHAPE <<< "${BENCH_SHAPE:---layers 12 --d_model 768 --heads 12 --context 1024}"
arg() { local i; for ((i = 0; i < ${#SHAPE[@]}; i++)); do [ "${SHAPE[$i]}" = "$1" ] && echo "${SHAPE[$((i + 1))]}"; done; }
L=$(arg --layers) C=$(arg --d_model) H=$(arg --heads) CTX=$(arg --context)
for f in "$RUNTIME" "$GPT"; do [ -e "$f" ] || { echo "bench_train_gpt_gpu: $f is missing"; exit 1; }; done
if ! command -v nvidia-smi > /dev/null || ! GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1) ||
  [ -z "$GPU" ]; then
  echo "bench_train_gpt_gpu: no GPU visible (nvidia-smi): nothing measured"; exit 77
fi
# Dense peaks (TFLOP/s) of the SXM parts, from NVIDIA's datasheets: fp32 (no tensor cores) and
# bf16 tensor cores without sparsity. H200 has H100 SXM's compute.
case $GPU in
  *H100*PCIe*) PF32=51 PBF16=756;;
  *H100*|*H200*) PF32=67 PBF16=989;;
  *A100*) PF32=19.5 PBF16=312;;
  *) PF32=0 PBF16=0;;
esac
PF32=${BENCH_PEAK_FP32:-$PF32} PBF16=${BENCH_PEAK_BF16:-$PBF16}
WORK=$(mktemp -d /tmp/dscpp_bench_gpt_gpu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# dscpp's configs: AdamW, clipping as GPT-2 training uses, one line per step.
ds_config() {  # NAME STAGE PRECISION
  local top=""
  [ "$3" = bf16 ] && top='"bf16": {"enabled": true},'
  cat > "$WORK/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": $MICRO, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "gradient_clipping": 1.0, $top "zero_optimization": {"stage": $2},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0006, "weight_decay": 0.1}}}
JSON
}
for s in 0 1 2 3; do ds_config "bf16s$s" $s bf16; done
ds_config bf16c32s0 0 bf16  # run with DSCPP_COMPUTE_DTYPE=fp32 (run_dscpp: names with c32)
ds_config fp32s0 0 fp32
ds_config fp32tiled 0 fp32  # run with DSCPP_FLASH_ATTENTION=tiled (run_dscpp: names with tiled)
# Per-block forward and backward times from the flops profiler (it synchronizes the device
# around each layer of its profiled step), in a run of its own: those waits cost throughput.
for p in bf16 fp32; do
  ds_config "${p}prof" 0 $p
  sed -i 's/^ "gradient_clipping"/ "flops_profiler": {"enabled": true, "profile_step": 4, "detailed": true},\n "gradient_clipping"/' \
    "$WORK/${p}prof.json"
done

dscpp_rate() { grep 'after the first' "$1" | grep -o '[0-9.]* tokens/s' | tail -1 | awk '{print $1}'; }
# The peak of device allocations: the last per-step line's "(peak X GiB)" (or MiB), the engine's
# own, plus the ops table's scratch high-water mark (GEMM staging, attention blocks, cuDNN and
# cuBLASLt buffers), which the runtime logs at the end: the two peaks may fall at different
# moments, so the sum is an upper bound on what dscpp held at once.
dscpp_peak() {
  local engine scratch
  engine=$(grep -o 'peak [0-9.]* [GM]iB' "$1" | tail -1 | awk '{print ($3 == "MiB") ? $2 / 1024 : $2}')
  scratch=$(grep -o 'ops table scratch peak per rank (bytes): [0-9]*' "$1" | awk '{print $NF}')
  awk -v e="${engine:-0}" -v s="${scratch:-0}" 'BEGIN {printf "%.3f\n", e + s / 1073741824}'
}
torch_rate() { grep -o '^throughput: .*= [0-9.]* tokens/s' "$1" | grep -o '= [0-9.]* tokens/s' | awk '{print $2}'; }
torch_peak() { grep -o '^peak memory: [0-9.]*' "$1" | awk '{print $3}'; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

run_dscpp() {  # NAME: trains with $WORK/NAME.json; prints "rate peak"
  local compute=auto attention=blockwise
  [[ $1 == *c32* ]] && compute=fp32
  [[ $1 == *tiled* ]] && attention=tiled
  DSCPP_COMPUTE_DTYPE=$compute DSCPP_FLASH_ATTENTION=$attention timeout -k 10 "$LIMIT" "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/$1.json" --steps "$STEPS" --device "$DEVICE" \
    --no_eval -- "${SHAPE[@]}" --sample_chars 0 > "$WORK/$1.log" 2>&1 ||
    { echo "dscpp $1 failed: $(grep -m3 -i -e error -e fail "$WORK/$1.log" | tr '\n' ' ' | cut -c1-300)" >&2; echo "0 0"; return; }
  echo "$(dscpp_rate "$WORK/$1.log") $(dscpp_peak "$WORK/$1.log")"
}
run_torch() {  # NAME DTYPE
  timeout -k 10 "$LIMIT" "$PYTHON" "$HERE/torch_gpt.py" --throughput --device cuda --dtype "$2" --attention sdpa \
    "${SHAPE[@]}" --batch "$MICRO" --steps $((STEPS - 2)) --warmup 2 > "$WORK/$1.log" 2>&1 ||
    { echo "torch $1 failed: $(tail -3 "$WORK/$1.log" | tr '\n' ' ' | cut -c1-300)" >&2; echo "0 0"; return; }
  echo "$(torch_rate "$WORK/$1.log") $(torch_peak "$WORK/$1.log")"
}

echo "GPU: $GPU (dense peaks: fp32 $PF32, bf16 $PBF16 TFLOP/s); gpt ${SHAPE[*]}, micro-batch $MICRO;" \
  "$STEPS steps per run, 2 untimed; $ROUNDS round(s)"
"$PYTHON" -c "import torch; print('PyTorch', torch.__version__, 'CUDA', torch.version.cuda)" 2>&1 | head -1
RUNS="dscpp:fp32s0 dscpp:fp32tiled torch:fp32 dscpp:bf16s0 torch:bf16 dscpp:bf16s1 dscpp:bf16s2 dscpp:bf16s3 dscpp:bf16c32s0"
for ((r = 1; r <= ROUNDS; r++)); do
  for run in $RUNS; do
    kind=${run%%:*} name=${run#*:}
    if [ "$kind" = dscpp ]; then out=$(run_dscpp "$name"); else out=$(run_torch "t$name" "$name"); name=t$name; fi
    echo "$name $out" >> "$WORK/results"
    echo "round $r: $kind $name: ${out% *} tokens/s, peak ${out#* } GiB"
  done
done
grep -m1 -o 'GEMMs: .*' "$WORK/bf16s0.log" | sed 's/^/dscpp bf16: /'
grep -m1 -o 'layers compute in .*' "$WORK/bf16s0.log" | sed 's/^/dscpp bf16: /'
grep -m1 -o 'attention on 16-bit GEMM math: .*' "$WORK/bf16s0.log" | sed 's/^/dscpp bf16: /'
grep -m1 -o 'GEMMs: .*' "$WORK/fp32s0.log" | sed 's/^/dscpp fp32: /'
# Backward over forward per transformer block (target <= 2.5), from the profiled step's table:
# "blocks.N  params  fwd flops  share  fwd ms  fwd FLOPS  bwd ms", read from its end (value and
# unit are separate fields).
for p in bf16 fp32; do
  out=$(run_dscpp "${p}prof")
  awk -v p=$p '$1 ~ /^(\[rank 0\] )?blocks\.[0-9]+$/ || $3 ~ /^blocks\.[0-9]+$/ {
      f = $(NF - 3); b = $NF  # fwd ms, then the two fields of fwd FLOPS, then bwd ms
      if (f > 0) { r = b / f; s += r; k++; if (r > m) m = r; ft += f; bt += b } }
    END { if (k) printf "dscpp %s, stage 0, profiled step: %d blocks, forward %.2f ms, backward %.2f ms per block; " \
                        "backward/forward mean %.2f, worst %.2f (target <= 2.5)\n", p, k, ft / k, bt / k, s / k, m
          else print "dscpp " p ": no per-block profile (the profiled run failed or printed none)" }' "$WORK/${p}prof.log"
done
med() { awk -v n="$1" -v c="$2" '$1 == n {print $c}' "$WORK/results" | median; }
# Parameters from the shape (the plugin's: embeddings V·C + T·C, 12·C² + 13·C per block, the
# final norm 2C, the head V·C without bias; V from the run's log).
V=$(grep -m1 -o 'vocabulary [0-9]*' "$WORK/fp32s0.log" | awk '{print $2}')
V=${V:-114}
awk -v L="$L" -v C="$C" -v T="$CTX" -v V="$V" -v pf="$PF32" -v pb="$PBF16" \
  -v df="$(med fp32s0 2)" -v tf="$(med tfp32 2)" -v db="$(med bf16s0 2)" -v tb="$(med tbf16 2)" \
  -v d1="$(med bf16s1 2)" -v d2="$(med bf16s2 2)" -v d3="$(med bf16s3 2)" \
  -v mdf="$(med fp32s0 3)" -v mtf="$(med tfp32 3)" -v mdb="$(med bf16s0 3)" -v mtb="$(med tbf16 3)" \
  -v m3="$(med bf16s3 3)" -v dc="$(med bf16c32s0 2)" -v mdc="$(med bf16c32s0 3)" \
  -v dt="$(med fp32tiled 2)" -v mdt="$(med fp32tiled 3)" 'BEGIN {
  N = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + V * C
  f = 6 * N + 12 * L * C * T
  printf "model: %.1f M parameters, %.3f GFLOP per token (6N + 12·L·C·T)\n", N / 1e6, f / 1e9
  row("dscpp fp32, stage 0", df, mdf, pf); row("dscpp fp32, tiled attention", dt, mdt, pf)
  row("torch fp32 + SDPA", tf, mtf, pf)
  row("dscpp bf16, stage 0", db, mdb, pb); row("torch bf16 autocast + SDPA", tb, mtb, pb)
  row("dscpp bf16, stage 1", d1, "", pb); row("dscpp bf16, stage 2", d2, "", pb); row("dscpp bf16, stage 3", d3, m3, pb)
  row("dscpp bf16, fp32 compute, s0", dc, mdc, pb)
  ratio("bf16 16-bit / fp32 compute", db, dc, "> 1: what 16-bit compute gained")
  ratio("fp32 tokens/s dscpp/torch", df, tf, ">= 1.0")
  ratio("fp32 tiled dscpp/torch", dt, tf, ">= 1.0")
  ratio("fp32 tiled / blockwise", dt, df, "> 1: make tiled the default")
  ratio("bf16 tokens/s dscpp/torch", db, tb, ">= 1.0")
  ratio("fp32 peak memory dscpp/torch", mdf, mtf, "<= 1.0")
  ratio("bf16 peak memory dscpp/torch", mdb, mtb, "<= 1.0")
  ratio("bf16 stage 1 / stage 0", d1, db, ">= 0.9"); ratio("bf16 stage 2 / stage 0", d2, db, ">= 0.9")
  ratio("bf16 stage 3 / stage 0", d3, db, ">= 0.9")
}
function row(what, rate, mem, peak) {
  printf "  %-28s %9.0f tokens/s", what, rate
  if (mem != "") printf ", peak %6.2f GiB", mem
  if (peak > 0) printf ", MFU %5.1f%%", 100 * rate * f / (peak * 1e12)
  printf "\n"
}
function ratio(what, a, b, target) {
  if (a > 0 && b > 0) printf "ratio %-30s %.2fx (target %s)\n", what, a / b, target
  else printf "ratio %-30s n/a (a run failed)\n", what
}'
