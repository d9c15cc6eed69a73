#!/usr/bin/env bash
# Training throughput of the Llama family (models/llama, on the layer library) against
# transformers' LlamaForCausalLM in PyTorch on the same config.json (models/llama/tiny-config.json:
# 4 layers x 256, 4 heads sharing 2 key/value heads, SwiGLU 688, tied embeddings, vocabulary 256),
# context 128, micro-batch 8, AdamW, fp32, one process with 2 threads, on the fortunes `computers`
# file as byte tokens. Each side's rate is the median of its per-step rates after 3 warm-up
# steps; the runs alternate for BENCH_ROUNDS rounds (default 3) and the ratio printed is the
# median of the per-round ratios. Both sides get the same OpenBLAS kernel setting
# (OPENBLAS_CORETYPE, default SkylakeX; BENCH_CORETYPE overrides) and OMP_WAIT_POLICY=PASSIVE, as
# bench_train_gpt.sh: without it Debian's torch 1.13 ran this model 4.6x slower here. The PyTorch
# side runs in the transformers venv that scripts/setup.sh makes (skipped, 77, without it);
# torch 1.13 has no scaled_dot_product_attention, so transformers runs its eager attention.
# Measured 2026-11-28 on the 2-core Xeon (AVX-512), 3 rounds: dscpp 5,942–6,925 tokens/s, torch
# 3,350–3,720: 1.77x (per-round 1.64–1.90).
# BENCH_EOS=10 (a byte: 10 ends each line, 37 each fortune) runs both with packed documents:
# dscpp's --reset_attention_mask --reset_position_ids against transformers given the same 4D
# mask and position_ids (torch_llama.py --eos).
# Usage: bench_train_llama.sh RUNTIME LLAMA_SO SOURCE_ROOT
set -u
RUNTIME=$1 LLAMA=$2 SRC=$3
DOCS=() TORCH_DOCS=() WHAT=""
if [ -n "${BENCH_EOS:-}" ]; then
  DOCS=(--reset_attention_mask --reset_position_ids --eos_id "$BENCH_EOS") TORCH_DOCS=(--eos "$BENCH_EOS")
  WHAT=", packed documents ended by token $BENCH_EOS"
fi
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
ROUNDS=${BENCH_ROUNDS:-3}
STEPS=20
TOKENS=/usr/share/games/fortunes/computers
if ! "$VENV/bin/python" -c "import transformers" 2> /dev/null || [ ! -f "$TOKENS" ]; then
  echo "bench_train_llama: no transformers venv at $VENV or no $TOKENS: skipping"
  exit 77
fi
export OPENBLAS_CORETYPE=${BENCH_CORETYPE:-SkylakeX} OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d /tmp/dscpp_bench_llama.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}}}
JSON
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  "$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/ds.json" --steps $((STEPS + 3)) --no_eval --threads 2 -- \
    --config "$SRC/models/llama/tiny-config.json" --context 128 --data "$TOKENS" --token_bytes 1 "${DOCS[@]}" > "$WORK/dscpp.log" 2>&1 ||
    { echo "FAIL: dscpp run"; tail -5 "$WORK/dscpp.log"; exit 1; }
  d=$(grep -o '| [0-9.]* tokens/s' "$WORK/dscpp.log" | awk '{print $2}' | tail -n $STEPS | sort -n |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  t=$("$VENV/bin/python" "$SRC/bench/torch_llama.py" "$SRC/models/llama/tiny-config.json" "$TOKENS" --context 128 \
    --batch 8 --steps $STEPS --threads 2 "${TORCH_DOCS[@]}" 2> /dev/null | tee "$WORK/torch.log" | sed -n 's/^torch: median \([0-9]*\) .*/\1/p')
  [ -n "$t" ] || { echo "FAIL: torch run"; cat "$WORK/torch.log"; exit 1; }
  ratio=$(awk -v d="$d" -v t="$t" 'BEGIN {printf "%.2f", d / t}')
  ratios+=("$ratio")
  echo "round $r: dscpp $d tokens/s, torch $t tokens/s ($(sed 's/^torch: //' "$WORK/torch.log")): ${ratio}x"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "llama family vs transformers + PyTorch (CPU, fp32, 1 process x 2 threads$WHAT): ${median}x (median of ${ROUNDS} rounds: ${ratios[*]})"
