#!/usr/bin/env bash
# Greedy generation throughput of `dscpp generate` (dscpp-runtime --generate) against transformers'
# generate(do_sample=False, num_beams=1) (bench/torch_generate.py) on the same random-weight
# Hugging Face directories and the same prompts, fp32 on the CPU, one process with 2 threads each
# (--threads 2; torch.set_num_threads(2) and OPENBLAS_NUM_THREADS=2):
#   (a) T5 on t5-small's shape (6 + 6 layers, d_model 512, 8 heads of 64, ReLU 2048, 32 relative
#       buckets up to 128, vocabulary 32128, tied head; torch_generate.py make-t5 scales the tied
#       embedding by 0.02 so the outputs vary and zeroes its eos row so neither side stops early),
#       8 random sources of 32-64 ids ending in </s> (1), 32 new tokens each: batch 1 (the first
#       4 sources one at a time) and batch 8 (dscpp --batch_size 8; transformers one batch padded
#       with an attention mask);
#   (b) the tiny Llama (models/llama/tiny-config.json, random weights), 8 prompts of 16 random
#       byte ids, 64 new tokens each, no eos on either side: batch 1 (dscpp streams one prompt
#       after another) and batch 8 (dscpp --batch_size 8, transformers one batch).
# Tokens/s counts generated tokens (not the prompt) over the wall time of the generation alone:
# for dscpp the time it prints per batch (per prompt for a decoder, prompt feeding included; model
# loading excluded), for transformers the time of generate() after one warm-up call; dscpp gets a
# warm-up too (its first batch repeats the first prompts and is not counted). Every round checks
# that each prompt got exactly max_new_tokens on both sides and counts the prompts whose ids agree.
# The runs alternate for BENCH_ROUNDS rounds (default 3); each line's figures are medians over the
# rounds, the ratio dscpp/transformers the median of the per-round ratios. Both sides get the same
# OpenBLAS kernel setting (OPENBLAS_CORETYPE, default SkylakeX; BENCH_CORETYPE overrides) and
# OMP_WAIT_POLICY=PASSIVE, as bench_train_llama.sh.
# Last, ZeRO-Inference's memory (a measurement, no baseline): `dscpp --num_procs 2 libt5.so
# --deepspeed_config Z --generate` on the 8 sources with stage 3 and offload_param cpu, once with
# the default gather window and once with stage3_max_live_parameters 1,000,000: the per-rank peak
# of gathered parameters and in total, and the host's parameter partition, against the model's
# fp32 parameter bytes (the memory plan's parameter count x 4), and whether the outputs equal one
# rank's.
# Measured 2026-12-07 on the 2-core AMD EPYC (AVX-512), load average about 1, 3 rounds (medians;
# per-round ratios in brackets): T5 batch 1 dscpp 111.4 tokens/s vs 49.9 (2.21x; 1.87-2.31), batch
# 8 467.2 vs 226.3 (2.04x; 1.92-2.37); Llama batch 1 5885 vs 306 (19.3x), batch 8 11636 vs 1636
# (6.6x; 3.8-7.5); ids equal on every prompt. ZeRO-Inference: the gathered-parameter peak per rank
# 1.00x the model's 242,026,496 bytes with the default window, 0.27x (the tied 32128 x 512
# embedding, the largest parameter) with the 1,000,000 window.
# The PyTorch side runs in the transformers venv that scripts/setup.sh makes (skipped, 77,
# without it).
# Usage: bench_generate.sh DSCPP RUNTIME T5_SO LLAMA_SO [SOURCE_ROOT]
set -u
DSCPP=$1 RUNTIME=$2 T5=$3 LLAMA=$4 SRC=${5:-$(cd "$(dirname "$0")/.." && pwd)}
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
ROUNDS=${BENCH_ROUNDS:-3}
T5_NEW=32 LLAMA_NEW=64
if ! "$VENV/bin/python" -c "import transformers" 2> /dev/null; then
  echo "bench_generate: no transformers venv at $VENV: skipping"
  exit 77
fi
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_generate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PY="$VENV/bin/python"
TORCH="$SRC/bench/torch_generate.py"
. "$SRC/tests/system/free_port.sh"  # port

"$PY" "$TORCH" make-t5 "$WORK/t5" > /dev/null 2>&1 || { echo "FAIL: making the T5 directory"; exit 1; }
"$PY" "$TORCH" make-llama "$SRC/models/llama/tiny-config.json" "$WORK/llama" > /dev/null 2>&1 ||
  { echo "FAIL: making the Llama directory"; exit 1; }
# Prompts, one a line as comma-separated ids; the Llama's also as a --prompts file of bytes (ids 32-126).
"$PY" - "$WORK" <<'PY'
import random, sys
work = sys.argv[1]
r = random.Random(1)
t5 = [[r.randrange(2, 32128) for _ in range(r.randint(32, 64) - 1)] + [1] for _ in range(8)]
llama = [[r.randrange(32, 127) for _ in range(16)] for _ in range(8)]
def write(name, prompts):
    with open(f"{work}/{name}", "w") as f:
        f.writelines(",".join(map(str, p)) + "\n" for p in prompts)
write("t5_b8.txt", t5)
write("t5_b1.txt", t5[:4])
write("llama.txt", llama)
with open(f"{work}/llama.bytes", "w") as f:  # the first again: dscpp's warm-up
    f.writelines("".join(map(chr, p)) + "\n" for p in [llama[0]] + llama)
with open(f"{work}/llama8.bytes", "w") as f:  # all 8 twice: a warm-up batch, then the measured one
    f.writelines("".join(map(chr, p)) + "\n" for p in llama + llama)
PY
T5_ARGS=(-- --from_hf "$WORK/t5" --max_source_length 64 --max_target_length 64)
LLAMA_ARGS=(-- --from_hf "$WORK/llama" --context 128)

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# dscpp_rate LOG: generated tokens / seconds over the `generated` lines after the first (the warm-up)
dscpp_rate() {
  sed -n 's/^generated \([0-9]*\) tokens .* in \([0-9.]*\) s (.*/\1 \2/p' "$1" | tail -n +2 |
    awk '{n += $1; s += $2} END {if (s > 0) printf "%.1f", n / s}'
}
# check NAME DSCPP_IDS TORCH_IDS NEW: every prompt got NEW tokens on both sides; prints "K/N"
check() {
  local bad
  bad=$(cat "$2" "$3" | awk -F, -v n="$4" 'NF != n' | wc -l)
  [ "$bad" -eq 0 ] && [ -s "$2" ] && [ "$(wc -l < "$2")" -eq "$(wc -l < "$3")" ] ||
    { echo "FAIL: $1: a prompt did not get $4 tokens on both sides"; paste -d'|' "$2" "$3" | head -3; exit 1; }
  echo "$(paste -d'|' "$2" "$3" | awk -F'|' '$1 == $2' | wc -l)/$(wc -l < "$2")"
}
# t5_dscpp BATCH PROMPTS LOG: the prompts after a warm-up batch of the first BATCH of them
t5_dscpp() {
  local ids
  ids=$( (head -n "$1" "$2"; cat "$2") | paste -sd';')
  "$RUNTIME" --model "$T5" --generate --prompt_ids "$ids" --max_new_tokens $T5_NEW --batch_size "$1" --threads 2 \
    "${T5_ARGS[@]}" > "$3" 2>&1 || { echo "FAIL: dscpp T5 batch $1"; tail -5 "$3"; exit 1; }
  sed -n 's/^ids: //p' "$3" | tail -n +$(($1 + 1)) > "$3.ids"
}
# torch_run DIR PROMPTS NEW BATCH LOG
torch_run() {
  "$PY" "$TORCH" run "$1" "$2" --max_new_tokens "$3" --batch "$4" --threads 2 > "$5" 2> "$5.err" ||
    { echo "FAIL: transformers on $1, batch $4"; tail -5 "$5.err"; exit 1; }
  sed -n 's/^ids: //p' "$5" > "$5.ids"
}
torch_rate() { sed -n 's/^torch: \([0-9.]*\) tokens\/s.*/\1/p' "$1"; }

declare -A RATE RATIO AGREE
add() { RATE[$1]="${RATE[$1]:-} $2"; }
ratio() { awk -v d="$1" -v t="$2" 'BEGIN {printf "%.2f", d / t}'; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  t5_dscpp 1 "$WORK/t5_b1.txt" "$WORK/d_t5_1.log"
  torch_run "$WORK/t5" "$WORK/t5_b1.txt" $T5_NEW 1 "$WORK/t_t5_1.log"
  t5_dscpp 8 "$WORK/t5_b8.txt" "$WORK/d_t5_8.log"
  torch_run "$WORK/t5" "$WORK/t5_b8.txt" $T5_NEW 8 "$WORK/t_t5_8.log"
  "$RUNTIME" --model "$LLAMA" --generate --prompts "$WORK/llama.bytes" --max_new_tokens $LLAMA_NEW --threads 2 \
    "${LLAMA_ARGS[@]}" > "$WORK/d_llama.log" 2>&1 || { echo "FAIL: dscpp Llama"; tail -5 "$WORK/d_llama.log"; exit 1; }
  sed -n 's/^ids: //p' "$WORK/d_llama.log" | tail -n +2 > "$WORK/d_llama.log.ids"
  "$RUNTIME" --model "$LLAMA" --generate --prompts "$WORK/llama8.bytes" --batch_size 8 --max_new_tokens $LLAMA_NEW \
    --threads 2 "${LLAMA_ARGS[@]}" > "$WORK/d_llama_8.log" 2>&1 ||
    { echo "FAIL: dscpp Llama batch 8"; tail -5 "$WORK/d_llama_8.log"; exit 1; }
  sed -n 's/^ids: //p' "$WORK/d_llama_8.log" | tail -n +9 > "$WORK/d_llama_8.log.ids"
  torch_run "$WORK/llama" "$WORK/llama.txt" $LLAMA_NEW 1 "$WORK/t_llama_1.log"
  torch_run "$WORK/llama" "$WORK/llama.txt" $LLAMA_NEW 8 "$WORK/t_llama_8.log"
  line="round $r:"
  for c in t5_1:d_t5_1:t_t5_1:$T5_NEW t5_8:d_t5_8:t_t5_8:$T5_NEW llama_1:d_llama:t_llama_1:$LLAMA_NEW \
    llama_8:d_llama_8:t_llama_8:$LLAMA_NEW; do
    IFS=: read -r name d t new <<< "$c"
    dr=$(dscpp_rate "$WORK/$d.log") tr=$(torch_rate "$WORK/$t.log")
    [ -n "$dr" ] && [ -n "$tr" ] || { echo "FAIL: no rate for $name (dscpp '$dr', transformers '$tr')"; exit 1; }
    AGREE[$name]=$(check "$name" "$WORK/$d.log.ids" "$WORK/$t.log.ids" "$new") || { echo "${AGREE[$name]}"; exit 1; }
    add "d_$name" "$dr"
    add "t_$name" "$tr"
    RATIO[$name]="${RATIO[$name]:-} $(ratio "$dr" "$tr")"
    line="$line $name dscpp $dr / transformers $tr tokens/s;"
  done
  echo "$line"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
summary() {  # NAME TEXT
  local d t q
  d=$(printf '%s\n' ${RATE[d_$1]} | median) t=$(printf '%s\n' ${RATE[t_$1]} | median)
  q=$(printf '%s\n' ${RATIO[$1]} | median)
  echo "$2: dscpp $d tokens/s, transformers $t tokens/s: ${q}x (per round:${RATIO[$1]}); ids agree on ${AGREE[$1]} prompts"
}
echo "greedy generation, dscpp vs transformers + PyTorch (CPU, fp32, 1 process x 2 threads, medians of $ROUNDS rounds):"
summary t5_1 "  T5 (t5-small shape), batch 1, 4 sources, $T5_NEW new tokens"
summary t5_8 "  T5 (t5-small shape), batch 8, 8 sources, $T5_NEW new tokens"
summary llama_1 "  tiny Llama, batch 1, 8 prompts of 16, $LLAMA_NEW new tokens"
summary llama_8 "  tiny Llama, batch 8, 8 prompts of 16, $LLAMA_NEW new tokens"

# ZeRO-Inference on 2 ranks: parameters partitioned (stage 3) and offloaded to host memory.
zero3() {  # FILE [MAX_LIVE]
  local window=""
  [ -n "${2:-}" ] && window=", \"stage3_param_persistence_threshold\": 0, \"stage3_max_live_parameters\": $2, \
\"stage3_prefetch_bucket_size\": $2"
  cat > "$1" <<JSON
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,
 "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}$window}}
JSON
}
zero3 "$WORK/z3.json"
zero3 "$WORK/z3small.json" 1000000
sed -n 's/^ids: //p' "$WORK/d_t5_8.log" | tail -n +9 | sort > "$WORK/one_rank.ids"
echo "ZeRO-Inference, T5 (t5-small shape) on 2 ranks x 1 thread, 8 sources, batch 8, $T5_NEW new tokens:"
bytes=""
for z in z3:"stage 3, offload_param cpu" z3small:"stage 3, offload_param cpu, stage3_max_live_parameters 1000000"; do
  cfg=${z%%:*} what=${z#*:}
  "$DSCPP" --num_procs 2 --master_port "$(port)" "$T5" --deepspeed_config "$WORK/$cfg.json" --generate \
    --prompt_ids "$(paste -sd';' "$WORK/t5_b8.txt")" --max_new_tokens $T5_NEW "${T5_ARGS[@]}" > "$WORK/$cfg.log" 2>&1 ||
    { echo "FAIL: dscpp ZeRO-Inference ($what)"; tail -5 "$WORK/$cfg.log"; exit 1; }
  if [ -z "$bytes" ]; then
    params=$(grep -o 'stage3_max_live_parameters below [0-9]*' "$WORK/$cfg.log" | head -1 | awk '{print $3}')
    [ -n "$params" ] || { echo "FAIL: no parameter count in the memory plan"; exit 1; }
    bytes=$((params * 4))
    echo "  model: $params parameters, $bytes bytes in fp32 ($(awk -v b="$bytes" 'BEGIN {printf "%.2f", b / 1048576}') MiB)"
  fi
  peak=$(grep -o 'memory peak per rank (bytes): .*' "$WORK/$cfg.log" | head -1)
  p=$(sed 's/.*params=\([0-9]*\),.*/\1/' <<< "$peak") total=$(sed 's/.*total=\([0-9]*\);.*/\1/' <<< "$peak")
  act=$(sed 's/.*activations=\([0-9]*\),.*/\1/' <<< "$peak") buf=$(sed 's/.*buffers=\([0-9]*\),.*/\1/' <<< "$peak")
  host=$(grep -o 'host memory peak per rank (bytes, measured/planned): params=[0-9]*' "$WORK/$cfg.log" | head -1 |
    sed 's/.*params=//')
  sed -n 's/^\[rank [01]\]   out=//p' "$WORK/$cfg.log" | sort > "$WORK/$cfg.ids"
  same=no
  cmp -s "$WORK/$cfg.ids" "$WORK/one_rank.ids" && same=yes
  echo "  $what: peak per rank: gathered params $p bytes ($(ratio "$p" "$bytes")x the model), total $total" \
    "($(ratio "$total" "$bytes")x; activations $act, buffers $buf); params in host memory $host; outputs equal one rank's: $same"
done
