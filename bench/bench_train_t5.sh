#!/usr/bin/env bash
# Training throughput of the T5 family (models/t5, libt5.so) against transformers'
# T5ForConditionalGeneration in PyTorch (bench/torch_t5.py) on t5-small's shape (6 + 6 layers,
# d_model 512, 8 heads of 64, ReLU feed-forward 2048, 32 relative-position buckets up to distance
# 128, vocabulary 32128, the head tied to the embedding) with dropout_rate 0 on both sides: dscpp
# applies no dropout, so transformers runs without it too (t5-small's own config says 0.1). Both
# train on the same random pre-tokenized JSON lines written here, {"input_ids": 128 ids ending in
# </s> (1), "labels": 64 ids ending in 1}, AdamW, fp32, micro-batch BENCH_MICRO (default 4: about a
# second per step on an idle 2-core machine) per process; tokens/s counts source + target tokens
# (192 per sample) on every rank.
#   (a) 1 process x 2 threads: dscpp-runtime, ZeRO-0, against torch with set_num_threads(2);
#   (b) 2 ranks x 1 thread: dscpp --num_procs 2, ZeRO-2, against DeepSpeed's ZeRO-2 on gloo with the
#       same torch AdamW where it runs in the venv, else against 2-process gloo DDP. DeepSpeed 0.19
#       needs torch >= 2.0 (its engine passes prepend= to register_forward_pre_hook) and JIT-builds
#       a shared-memory allreduce from torch's C++ headers, which Debian's torch 1.13 does not ship
#       (torch_t5.py turns that op off where the headers are missing): the script tries DeepSpeed
#       first (BENCH_TORCH2=deepspeed or ddp skips the try) and prints why it does not run.
# Each side's rate is the median of its per-step rates after BENCH_WARMUP warm-up steps (default
# 2) over BENCH_STEPS timed steps (default 5); the four runs alternate for BENCH_ROUNDS rounds
# (default 3) and the ratios printed are the medians of the per-round ratios. Both sides get the
# same OpenBLAS kernel setting (OPENBLAS_CORETYPE, default SkylakeX; BENCH_CORETYPE overrides) and
# OMP_WAIT_POLICY=PASSIVE, as bench_train_llama.sh; the peak resident memory of each side's largest
# process comes from /usr/bin/time where it is installed. BENCH_RT=1 (root) runs everything at
# real-time round-robin priority, as bench_train_gpt.sh. The PyTorch side runs in the transformers
# venv that scripts/setup.sh makes (skipped, 77, without it).
# Measured 2026-12-07 on the 2-core AMD EPYC (AVX-512), load average 1-2, 3 rounds, after the
# thread pool stopped sleeping between short jobs, two runs of 3 rounds: (a) 1.68x (dscpp 851
# tokens/s, torch 541; per-round 1.49-1.88x) and 1.42x (923 against 649; 1.38-1.54x), (b) against
# DDP 1.37x (905 against 661; 1.35-1.54x) and 1.28x (928 against 712; 1.27-1.38x): torch's rate
# moves by a quarter between runs here. At 2 ranks dscpp's step is its GEMMs at 93 GFLOP/s per
# core (81% of the FMA peak); ZeRO-2's communication is 5 ms of 1.5 s (wall_clock_breakdown). Earlier, while other jobs held a load average of 5-9,
# 3 runs of 3 rounds, DeepSpeed refused as above so (b) is against DDP: (a) 1.42x / 1.38x / 1.46x
# (dscpp 249-324 tokens/s, torch 162-211; per-round 1.26-2.23x), (b) 1.31x / 1.64x / 1.05x (dscpp
# 248-346, torch 190-253; per-round 1.03-1.98x); peak RSS dscpp 1542 MiB against torch 2005 MiB at
# 1 process, 1260 against 2335 MiB per rank. CPU time per step, which that load disturbs less: 1
# thread 1.53-1.58 s against 2.04-2.12 s (1.34-1.38x), 2 ranks 3.03 s against 3.99 s (1.32x).
# Where the time goes (1 thread, steady state): dscpp spends 88% in its fp32 GEMM, which runs these
# shapes (rows 512 in the encoder, 256 in the decoder, the 32128-wide head) at OpenBLAS's rate
# (1.00-1.06x alone), so its lead is torch's non-GEMM time (AdamW's unfused ops ~10%, the
# embedding's backward ~7%, elementwise adds, fills and divisions): with dscpp's other 12% at zero
# the CPU-time ratio would be about 1.5x.
# Usage: bench_train_t5.sh DSCPP RUNTIME T5_SO [SOURCE_ROOT]
set -u
DSCPP=$1 RUNTIME=$2 T5=$3 SRC=${4:-$(cd "$(dirname "$0")/.." && pwd)}
if [ "${BENCH_RT:-0}" = 1 ] && [ -z "${BENCH_RT_ACTIVE:-}" ]; then
  BENCH_RT_ACTIVE=1 exec chrt -r 50 bash "$0" "$@"
fi
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
ROUNDS=${BENCH_ROUNDS:-3} STEPS=${BENCH_STEPS:-5} WARMUP=${BENCH_WARMUP:-2} MICRO=${BENCH_MICRO:-4}
SOURCE=128 TARGET=64
if ! "$VENV/bin/python" -c "import transformers" 2> /dev/null; then
  echo "bench_train_t5: no transformers venv at $VENV: skipping"
  exit 77
fi
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE DS_BUILD_OPS=0
WORK=$(mktemp -d /tmp/dscpp_bench_t5.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/config.json" <<'JSON'
{"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": true,
 "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_decoder_layers": 6, "num_heads": 8,
 "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "vocab_size": 32128,
 "feed_forward_proj": "relu", "tie_word_embeddings": true, "dropout_rate": 0.0, "layer_norm_epsilon": 1e-6,
 "initializer_factor": 1.0, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}
JSON
. "$SRC/bench/bench_common.sh"  # config, timed, median, step_rates, dscpp_rate
config "$WORK/zero0.json" 0
config "$WORK/zero2.json" 2
# Enough samples that no run wraps around: 2 ranks x micro-batch x every step.
"$VENV/bin/python" - "$WORK/train.jsonl" $((2 * MICRO * (WARMUP + STEPS))) $SOURCE $TARGET <<'PY'
import json, random, sys
path, n, s, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(0)
with open(path, "w") as f:
    for _ in range(n):
        ids = [r.randrange(2, 32128) for _ in range(s - 1)] + [1]
        labels = [r.randrange(2, 32128) for _ in range(t - 1)] + [1]
        f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
PY
dscpp_best() { step_rates "$1" | sort -g | tail -1; }
torch_rate() { sed -n 's/^torch: median \([0-9]*\) .*/\1/p' "$1"; }
torch_best() { sed -n 's/^torch: .*(best \([0-9]*\);.*/\1/p' "$1"; }
rss_mib() { awk '{printf "%.0f", $1 / 1024}' "$1"; }
T=("$VENV/bin/python" "$SRC/bench/torch_t5.py" "$WORK/config.json" "$WORK/train.jsonl" --batch "$MICRO"
  --steps "$STEPS" --warmup "$WARMUP")

ENGINE=${BENCH_TORCH2:-auto}
if [ "$ENGINE" = auto ]; then
  timeout 300 "${T[@]}" --probe_deepspeed 2 > "$WORK/probe.log" 2>&1
  if grep -q '^deepspeed: ok' "$WORK/probe.log"; then
    ENGINE=deepspeed
  else
    ENGINE=ddp
    why=$(grep -m1 '^deepspeed: unavailable' "$WORK/probe.log" | sed 's/^deepspeed: unavailable: //')
    echo "DeepSpeed ZeRO-2 in the venv does not run here (${why:-no reason printed; $(tail -1 "$WORK/probe.log")});" \
      "$("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)' 2> /dev/null):" \
      "configuration (b) compares against 2-process gloo DDP"
  fi
fi
[ "$ENGINE" = deepspeed ] && TORCH2="DeepSpeed ZeRO-2 (gloo)" || TORCH2="DDP (gloo)"
echo "t5-small shape, source $SOURCE + target $TARGET tokens, micro-batch $MICRO per process, AdamW, fp32," \
  "dropout 0 on both sides (dscpp has none); $WARMUP warm-up + $STEPS timed steps per run, $ROUNDS rounds;" \
  "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE OMP_WAIT_POLICY=$OMP_WAIT_POLICY; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  timed "$WORK/d1.rss" "$RUNTIME" --model "$T5" --deepspeed_config "$WORK/zero0.json" --steps $((WARMUP + STEPS)) \
    --no_eval --threads 2 -- --config "$WORK/config.json" --data "$WORK/train.jsonl" > "$WORK/d1.log" 2>&1 ||
    { echo "FAIL: dscpp 1 rank"; tail -5 "$WORK/d1.log"; exit 1; }
  [ "$r" = 1 ] && grep -o 'fp32 GEMM: .*' "$WORK/d1.log" | head -1 | sed 's/^/dscpp /'
  timed "$WORK/t1.rss" "${T[@]}" --threads 2 > "$WORK/t1.log" 2>&1 || { echo "FAIL: torch 1 process"; tail -5 "$WORK/t1.log"; exit 1; }
  timed "$WORK/d2.rss" "$DSCPP" --num_procs 2 --master_port $((20000 + RANDOM % 20000)) "$T5" \
    --deepspeed_config "$WORK/zero2.json" --steps $((WARMUP + STEPS)) --threads 1 --no_eval -- \
    --config "$WORK/config.json" --data "$WORK/train.jsonl" > "$WORK/d2.log" 2>&1 ||
    { echo "FAIL: dscpp 2 ranks"; tail -5 "$WORK/d2.log"; exit 1; }
  timed "$WORK/t2.rss" "${T[@]}" --ddp 2 --engine "$ENGINE" > "$WORK/t2.log" 2>&1 ||
    { echo "FAIL: torch 2 processes ($ENGINE)"; tail -5 "$WORK/t2.log"; exit 1; }
  d1=$(dscpp_rate "$WORK/d1.log") t1=$(torch_rate "$WORK/t1.log") d2=$(dscpp_rate "$WORK/d2.log") t2=$(torch_rate "$WORK/t2.log")
  [ -n "$d1" ] && [ -n "$t1" ] && [ -n "$d2" ] && [ -n "$t2" ] || { echo "FAIL: no rate in a log"; tail -3 "$WORK"/*.log; exit 1; }
  echo "$d1 $t1 $d2 $t2 $(rss_mib "$WORK/d1.rss") $(rss_mib "$WORK/t1.rss") $(rss_mib "$WORK/d2.rss")" \
    "$(rss_mib "$WORK/t2.rss") $(dscpp_best "$WORK/d1.log") $(torch_best "$WORK/t1.log") $(dscpp_best "$WORK/d2.log")" \
    "$(torch_best "$WORK/t2.log")" >> "$WORK/rounds"
  awk -v r="$r" -v d1="$d1" -v t1="$t1" -v d2="$d2" -v t2="$t2" -v what="$TORCH2" 'BEGIN {
    printf "round %d: 1 x 2 threads: dscpp %.0f, torch %.0f tokens/s (%.2fx); 2 ranks: dscpp ZeRO-2 %.0f, torch %s %.0f tokens/s (%.2fx)\n",
      r, d1, t1, d1 / t1, d2, what, t2, d2 / t2 }'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
col() { awk -v c="$1" '{print $c}' "$WORK/rounds" | median | awk '{printf "%.0f", $1}'; }
r1=$(awk '{print $1 / $2}' "$WORK/rounds" | median) r2=$(awk '{print $3 / $4}' "$WORK/rounds" | median)
rss=""
[ ${#TIME[@]} -gt 0 ] && rss=$(printf "; peak RSS of the largest process: dscpp %s MiB, torch %s MiB" "$(col 5)" "$(col 6)")
rss2=""
[ ${#TIME[@]} -gt 0 ] && rss2=$(printf "; peak RSS per rank: dscpp %s MiB, torch %s MiB" "$(col 7)" "$(col 8)")
echo "(a) 1 process x 2 threads, dscpp ZeRO-0 vs torch: median dscpp $(col 1), torch $(col 2) tokens/s$rss"
echo "(b) 2 ranks x 1 thread, dscpp ZeRO-2 vs torch $TORCH2: median dscpp $(col 3), torch $(col 4) tokens/s$rss2"
ratios() { awk -v a="$1" -v b="$2" '{printf "%s%.2f", (NR > 1 ? " " : ""), $a / $b}' "$WORK/rounds"; }
b1=$(awk '{print $9 / $10}' "$WORK/rounds" | median) b2=$(awk '{print $11 / $12}' "$WORK/rounds" | median)
# Each run's fastest step: on a shared machine, the least disturbed figure.
awk -v a="$b1" -v b="$b2" 'BEGIN { printf "ratio of best steps (median of per-round ratios): (a) %.2fx, (b) %.2fx\n", a, b }'
awk -v a="$r1" -v b="$r2" -v n="$ROUNDS" -v ra="$(ratios 1 2)" -v rb="$(ratios 3 4)" 'BEGIN {
  printf "t5 family vs transformers + PyTorch (CPU, fp32): (a) %.2fx, (b) %.2fx (medians of %d per-round ratios: (a) %s; (b) %s)\n",
    a, b, n, ra, rb }'
