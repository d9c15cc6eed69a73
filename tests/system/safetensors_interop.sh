#!/usr/bin/env bash
# Interoperability with PyPI's `safetensors` (the reference implementation's bindings):
# our writer → safetensors.numpy.load_file, and safetensors.numpy.save_file → our reader.
# Usage: safetensors_interop.sh TOOL   (TOOL = tests/tools/safetensors_interop)
# Exits 77 (Meson: skipped) when no Python with both numpy and safetensors is found.
set -euo pipefail
tool=$1

py=""
for cand in "${PYTHON:-}" python3 /usr/bin/python3; do
  [[ -n $cand ]] || continue
  if "$cand" -c 'import numpy, safetensors.numpy' >/dev/null 2>&1; then py=$cand; break; fi
done
if [[ -z $py ]]; then
  echo "SKIP: no python3 with both numpy and safetensors (pip install numpy safetensors, or set PYTHON)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$tool" write "$tmp/ours.safetensors"

# The expected values repeat the formulas of tests/tools/safetensors_interop.cpp.
"$py" - "$tmp/ours.safetensors" "$tmp/theirs.safetensors" <<'PY'
import sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

k = lambda n: np.arange(n)
expected = {
    "f32": (k(12) * 0.25 - 3).astype(np.float32).reshape(3, 4),
    "f16": (k(5) * 0.5 - 2).astype(np.float16),
    "f64": (k(8) / 3.0).reshape(2, 2, 2),
    "scalar": np.array(2.5, dtype=np.float64),
    "i32": (k(4) * 1000 - 1500).astype(np.int32),
    "i64": (k(3).astype(np.int64) * 3000000000 - 1),
    "i8": (k(6) * 50 - 128).astype(np.int8),
    "u8": (k(6) * 40).astype(np.uint8).reshape(2, 3),
    "empty": np.zeros((0, 3), dtype=np.float32),
}
meta = {"producer": "dscpp", "step": "7"}

ours, theirs = sys.argv[1], sys.argv[2]
got = load_file(ours)
bad = []
if sorted(got) != sorted(expected):
    bad.append(f"names {sorted(got)} != {sorted(expected)}")
for name, want in expected.items():
    g = got.get(name)
    if g is None:
        continue
    if g.dtype != want.dtype or g.shape != want.shape or g.tobytes() != want.tobytes():
        bad.append(f"{name}: got {g.dtype} {g.shape} {g.ravel()[:6]}, want {want.dtype} {want.shape} {want.ravel()[:6]}")
with safe_open(ours, framework="numpy") as f:
    if f.metadata() != meta:
        bad.append(f"metadata {f.metadata()} != {meta}")
if bad:
    print("safetensors (Python) disagrees with dscpp's file:", *bad, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"safetensors (Python) read {ours}: {len(expected)} tensors and metadata match")
save_file(expected, theirs, metadata=meta)
PY

"$tool" check "$tmp/theirs.safetensors"
echo "safetensors interop: both directions match"
