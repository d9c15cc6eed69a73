#!/usr/bin/env bash
# English→German with a small T5, end to end and offline, on a dictionary's real pairs:
#   1. make_data.py       FreeDict's English-German dictionary → train.jsonl / eval.jsonl
#   2. make_tokenizer.py  a T5-style Unigram tokenizer trained on them, checked against dscpp tokenize
#   3. dscpp              trains build/models/t5/libt5.so (t5-tiny-config.json) on 2 CPU ranks, ZeRO-2;
#                         each evaluation also translates the eval sources and prints their BLEU
#   4. dscpp export-hf    the checkpoint → a Hugging Face directory (with the tokenizer beside it)
#   5. translate_hf.py    transformers loads it, computes the eval loss (dscpp's final one again) and
#                         translates the eval sources greedily
#   6. dscpp generate     the same greedy translations from the checkpoint, compared line by line
#   7. BLEU and chrF of both against the references (dscpp bleu; sacrebleu too when installed)
#
#   examples/translation/run.sh [WORK_DIR]      (default WORK_DIR: build/translation-demo)
#
# Settings from the environment: BUILD (the Meson build directory, default build), PYTHON (one with
# transformers, tokenizers and torch; default /opt/dscpp-hf-venv/bin/python), STEPS (1000),
# EVAL_INTERVAL (200), MAX_WORDS (8: pairs of at most 8 words a side), NUM_PROCS (2),
# MAX_SOURCE_LENGTH (24) and MAX_TARGET_LENGTH (16): at 24/16 0.8% of the pairs are cut (sources
# average 11 tokens with the prefix, targets 6.4, </s> included); each micro-batch is computed over
# its own longest pair.
# Needs the Debian package dict-freedict-eng-deu (scripts/setup.sh installs it).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$root/build}
PYTHON=${PYTHON:-/opt/dscpp-hf-venv/bin/python}
STEPS=${STEPS:-1000}
EVAL_INTERVAL=${EVAL_INTERVAL:-200}
MAX_WORDS=${MAX_WORDS:-8}
NUM_PROCS=${NUM_PROCS:-2}
MAX_SOURCE_LENGTH=${MAX_SOURCE_LENGTH:-24}
MAX_TARGET_LENGTH=${MAX_TARGET_LENGTH:-16}
work=${1:-$BUILD/translation-demo}
dscpp=$BUILD/launcher/dscpp
plugin=$BUILD/models/t5/libt5.so
prefix="translate English to German: "

for f in "$dscpp" "$plugin"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "run.sh: $f is missing: build dscpp first (meson setup build && ninja -C build)" >&2; exit 1; }
done
[ -f /usr/share/dictd/freedict-eng-deu.index ] ||
  { echo "run.sh: the dictionary is missing: apt-get install dict-freedict-eng-deu (or scripts/setup.sh)" >&2; exit 1; }
"$PYTHON" -c "import tokenizers, transformers, torch" 2>/dev/null ||
  { echo "run.sh: $PYTHON lacks tokenizers, transformers or torch (set PYTHON=...)" >&2; exit 1; }

export PYTHONWARNINGS=ignore::FutureWarning  # transformers' notices about its next versions
mkdir -p "$work"
stage() { echo; echo "=== $(date +%T) $*"; }
t0=$(date +%s)

stage "1. pairs from the dictionary"
/usr/bin/python3 "$here/make_data.py" "$work/data" --max_words "$MAX_WORDS"

stage "2. tokenizer"
"$PYTHON" "$here/make_tokenizer.py" "$work/data/train.jsonl" "$work/tokenizer" --source_prefix "$prefix" \
  --dscpp "$dscpp" --check "$work/data/eval.jsonl"

stage "3. training: $STEPS steps on $NUM_PROCS ranks"
rm -rf "$work/ckpt"
t_train=$(date +%s)
"$dscpp" --num_procs "$NUM_PROCS" "$plugin" --deepspeed_config "$here/ds_config.json" \
  --steps "$STEPS" --eval_interval "$EVAL_INTERVAL" --save_dir "$work/ckpt" \
  --predict_with_generate --tokenizer "$work/tokenizer" -- \
  --config "$here/t5-tiny-config.json" --tokenizer "$work/tokenizer" \
  --data "$work/data/train.jsonl" --eval_data "$work/data/eval.jsonl" \
  --source_lang en --target_lang de --source_prefix "$prefix" \
  --max_source_length "$MAX_SOURCE_LENGTH" --max_target_length "$MAX_TARGET_LENGTH" --truncation 2>&1 | tee "$work/train.log"
echo "run.sh: training took $(( $(date +%s) - t_train )) s; evaluations:"
grep -E "eval at step|final eval" "$work/train.log" | sed 's/^.*info: /  /'

stage "4. export to a Hugging Face directory"
rm -rf "$work/hf"
"$dscpp" export-hf "$work/ckpt" "$work/hf"
cp "$work/tokenizer"/* "$work/hf/"

stage "5. transformers translates the eval sources (greedy)"
"$PYTHON" "$here/translate_hf.py" "$work/hf" "$work/data/eval.jsonl" "$work/eval" --source_prefix "$prefix" \
  --max_source_length "$MAX_SOURCE_LENGTH" --max_target_length "$MAX_TARGET_LENGTH" --max_new_tokens "$MAX_TARGET_LENGTH"

stage "6. dscpp generate translates them from the checkpoint (greedy)"
sed "s/^/$prefix/" "$work/eval.src" > "$work/eval.prompts"
"$dscpp" generate "$plugin" --load_dir "$work/ckpt" --prompts "$work/eval.prompts" --tokenizer "$work/tokenizer" \
  --max_new_tokens "$MAX_TARGET_LENGTH" -- --config "$here/t5-tiny-config.json" --tokenizer "$work/tokenizer" \
  > "$work/generate.log"
# One line each, whitespace runs folded and the ends stripped, as translate_hf.py writes its outputs.
grep '^output:' "$work/generate.log" | sed 's/^output://' | awk '{ $1 = $1; print }' > "$work/eval.dscpp.txt"
awk '/^generated / { t += $2; p += $5; s += $8 }
     END { printf "run.sh: dscpp generate: %d tokens for %d prompts in %.1f s\n", t, p, s }' "$work/generate.log"
same=$(paste -d '\t' "$work/eval.hf.txt" "$work/eval.dscpp.txt" | awk -F '\t' '$1 == $2' | wc -l)
echo "run.sh: dscpp generate and transformers agree on $same of $(wc -l < "$work/eval.src") translations"

# ---------------------------------------------------------------------------------------------
# 7. BLEU: corpus BLEU (and chrF) of the greedy translations against the references, by dscpp
#    bleu and, when the Python has it, by sacrebleu's own command (the same settings: 13a, exp).
# ---------------------------------------------------------------------------------------------
stage "7. BLEU and chrF"
for hyp in hf dscpp; do
  echo "$hyp outputs, dscpp bleu:"
  "$dscpp" bleu "$work/eval.ref" -i "$work/eval.$hyp.txt" -m bleu chrf | sed 's/^/  /'
  if "$PYTHON" -c "import sacrebleu" 2>/dev/null; then
    echo "$hyp outputs, sacrebleu:"
    "$PYTHON" -m sacrebleu "$work/eval.ref" -i "$work/eval.$hyp.txt" -m bleu chrf -f text | sed 's/^/  /'
  fi
done

echo
echo "run.sh: done in $(( $(date +%s) - t0 )) s; everything is in $work"
