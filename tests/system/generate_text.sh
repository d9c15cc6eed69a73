#!/usr/bin/env bash
# `dscpp generate --prompt TEXT` through the model directory's tokenizer equals transformers'
# greedy generate (generate_text.py). Needs the venv scripts/setup.sh makes; skipped without it.
# Usage: generate_text.sh DSCPP LLAMA_SO
set -u
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
if ! "$VENV/bin/python" -c "import transformers, tokenizers, torch" 2> /dev/null; then
  echo "generate_text: no transformers venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
exec "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/generate_text.py" "$1" "$2"
