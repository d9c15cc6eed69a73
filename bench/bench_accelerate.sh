#!/usr/bin/env bash
# From an Accelerate config file to the DeepSpeed config the ranks get: `dscpp config check
# --config_file` against Accelerate's own path to the same dictionary (its launch validation,
# prepare_deepspeed_cmd_env, DeepSpeedPlugin and set_mixed_precision, in Python:
# tests/tools/accelerate_oracle.py, PyPI's accelerate from scripts/setup.sh), best of 5 wall
# times each, on a ZeRO-3 config with offload and a JSON with "auto" values; then dscpp's
# launch-to-all-ranks-running time with that file (2 ranks of a trivial program).
# Skips (77) without the transformers venv or accelerate.
# Measured 2026-12-07 on the 2-core AMD EPYC: dscpp 7 ms against 1237 ms (177x; Python's imports
# of torch and accelerate are most of it); launch to 2 ranks running 8 ms.
#   bench_accelerate.sh DSCPP [SOURCE_ROOT]
set -u
DSCPP=$(realpath "$1") SRC=$(realpath "${2:-$(dirname "$0")/..}")
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv} ACCELERATE=${DSCPP_ACCELERATE:-/opt/dscpp-accelerate}
export PYTHONPATH="$ACCELERATE:$SRC/tests/tools"
"$VENV/bin/python" -c "import accelerate_oracle" 2> /dev/null || { echo "bench_accelerate: no accelerate: skipping"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
cat > ds.json <<'JSON'
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
 "zero_optimization": {"stage": "auto", "offload_param": {"device": "auto"}, "offload_optimizer": {"device": "auto"}}}
JSON
cat > cfg.yaml <<'YAML'
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_config_file: ds.json
num_machines: 1
num_processes: 2
use_cpu: true
YAML
FLAGS=(--zero_stage 3 --offload_param_device cpu --offload_optimizer_device cpu --mixed_precision bf16)
best_of() {  # CMD...: the smallest wall time in ms of 5 runs
  local best=999999 i start ms
  for i in 1 2 3 4 5; do
    start=$(date +%s%N)
    "$@" > out 2>&1 || { echo "FAILED: $* ($(tail -1 out))" >&2; return 1; }
    ms=$((($(date +%s%N) - start) / 1000000))
    [ "$ms" -lt "$best" ] && best=$ms
  done
  echo "$best"
}
dscpp_ms=$(best_of "$DSCPP" config check -q --config_file cfg.yaml "${FLAGS[@]}") || exit 1
python_ms=$(best_of "$VENV/bin/python" "$SRC/tests/tools/accelerate_oracle.py" cfg.yaml "${FLAGS[@]}") || exit 1
grep -q '^config:' out || { echo "accelerate did not derive the config: $(cat out)"; exit 1; }
printf '#!/bin/sh\ndate +%%s%%N >> %s/stamps\n' "$tmp" > stamp.sh && chmod +x stamp.sh
launch_best=999999
for i in 1 2 3 4 5; do
  : > stamps
  start=$(date +%s%N)
  "$DSCPP" --config_file cfg.yaml "${FLAGS[@]}" ./stamp.sh > out 2>&1 || { echo "FAILED launch: $(tail -2 out)"; exit 1; }
  ms=$((($(sort -n stamps | tail -1) - start) / 1000000))
  [ "$ms" -lt "$launch_best" ] && launch_best=$ms
done
echo "Accelerate config -> DeepSpeed config: dscpp ${dscpp_ms} ms, accelerate (Python) ${python_ms} ms:" \
  "$(awk -v a="$python_ms" -v b="$dscpp_ms" 'BEGIN { printf "%.1fx", a / (b > 0 ? b : 1) }') faster"
echo "dscpp --config_file: launch to 2 ranks running ${launch_best} ms"
