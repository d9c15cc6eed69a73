#!/usr/bin/env bash
# `dscpp tokenize --input ... --output PREFIX` against the tokenizers library on Debian's fortunes:
# Megatron .bin/.idx and llm.c files, thread-count independence, gzip and JSON-lines input, bad
# input (tokenize_data.py). Needs the venv scripts/setup.sh makes; skipped (77) without it.
# Usage: tokenize_data.sh DSCPP
set -u
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
if ! "$VENV/bin/python" -c "import transformers, tokenizers, numpy" 2> /dev/null; then
  echo "tokenize_data: no transformers venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
exec "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/tokenize_data.py" "$1"
