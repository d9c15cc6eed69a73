#!/usr/bin/env bash
# Tokenization speed: `dscpp tokenize --input corpus --lines` (a Megatron .bin/.idx written)
# against HF tokenizers' encode_batch (Rust, RAYON_NUM_THREADS threads) on the same corpus and
# byte-level BPE (32,000 tokens; bench/tokenize_corpus.py makes both from Debian's text, at least
# 20 MB), at 1 and 2 threads, alternated for BENCH_ROUNDS rounds (default 3); prints MB/s of text
# for each and the median of the per-round ratios dscpp / HF. Both count the same tokens (the
# eos per document included); the script checks that they agree.
# Usage: bench_tokenize.sh DSCPP [MB]
set -euo pipefail
DSCPP=$1 MB=${2:-24} ROUNDS=${BENCH_ROUNDS:-3}
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=$(mktemp -d /tmp/bench_tokenize.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" "$HERE/tokenize_corpus.py" "$WORK" "$MB"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ratios
for round in $(seq "$ROUNDS"); do
  for threads in 1 2; do
    hf=$(RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true "$VENV/bin/python" "$HERE/tokenize_hf.py" "$WORK/tok" "$WORK/corpus.txt")
    line=$("$DSCPP" tokenize --tokenizer "$WORK/tok" --input "$WORK/corpus.txt" --lines --threads "$threads" \
      --output "$WORK/out" 2>&1 | tail -1)
    ours=$(sed -n 's/.* (\([0-9.]*\) MB\/s,.*/\1/p' <<< "$line")
    ours_tokens=$(sed -n 's/.* \([0-9]*\) tokens (end of document.*/\1/p' <<< "$line")
    hf_rate=${hf%% *} hf_tokens=$(awk '{print $3}' <<< "$hf")
    [ "$ours_tokens" = "$hf_tokens" ] || { echo "token counts differ: dscpp $ours_tokens, HF $hf_tokens"; exit 1; }
    r=$(awk -v a="$ours" -v b="$hf_rate" 'BEGIN {printf "%.2f", a / b}')
    ratios[$threads]="${ratios[$threads]:-} $r"
    echo "round $round, $threads thread(s): dscpp $ours MB/s, HF tokenizers $hf_rate MB/s ($hf_tokens tokens): ${r}x"
  done
done
for threads in 1 2; do
  med=$(tr ' ' '\n' <<< "${ratios[$threads]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "median dscpp / HF tokenizers at $threads thread(s): ${med}x"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
