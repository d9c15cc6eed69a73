#!/usr/bin/env bash
# DeepSpeed's own classes against dscpp's decisions (tests/system/ds_rules.py says which), in the
# venv scripts/setup.sh makes; skipped (77) without DeepSpeed there.
# Usage: ds_rules.sh DS_RULE_TRACE
set -u
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
if ! "$VENV/bin/python" -c "import deepspeed" > /dev/null 2>&1; then
  echo "ds_rules: no DeepSpeed in the venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
exec "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/ds_rules.py" "$1"
