#!/usr/bin/env bash
# `dscpp tokenize` encodes and decodes as transformers' fast tokenizers (AutoTokenizer) do, on four
# small tokenizers trained here from Debian's fortunes: GPT-2 byte-level BPE, Llama 3 BPE, a T5
# SentencePiece Unigram and a Llama 2 SentencePiece BPE with byte fallback (tokenize_parity.py
# says what each holds and which texts it runs). Needs the venv scripts/setup.sh makes, with
# sentencepiece; skipped (77) without it, or while dscpp has no `tokenize` subcommand.
# TOKENIZE_PARITY_KEEP=DIR keeps the tokenizer directories and expected results for debugging;
# `tokenize_parity.py --write-only DIR` writes them without dscpp.
# Usage: tokenize_parity.sh DSCPP
set -u
DSCPP=$1
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
if ! "$VENV/bin/python" -c "import transformers, tokenizers, sentencepiece, google.protobuf" 2> /dev/null; then
  echo "tokenize_parity: no transformers + sentencepiece venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
exec "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/tokenize_parity.py" "$DSCPP"
