#!/usr/bin/env bash
# models::read_seq2seq's translation and summarization examples against transformers' tokenizer
# calls in run_translation.py and run_summarization.py, on a T5 tokenizer trained here from the
# fortunes (seq2seq_parity.py). Needs the venv scripts/setup.sh makes, with sentencepiece;
# skipped (77) without it.
# Usage: seq2seq_parity.sh SEQ2SEQ_DUMP
set -u
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
if ! "$VENV/bin/python" -c "import transformers, tokenizers, sentencepiece, google.protobuf" 2> /dev/null; then
  echo "seq2seq_parity: no transformers + sentencepiece venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
exec "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/seq2seq_parity.py" "$1"
