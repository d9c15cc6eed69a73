#!/usr/bin/env bash
# Where a gpt training step's GPU time goes, per kernel, from Nsight Compute (ncu, shipped with
# CUDA): the gpt example at the benchmark's width (768, 12 heads, context 1024, micro-batch 8)
# but PROFILE_LAYERS blocks (default 2), PROFILE_STEPS steps (default 2), for each precision in
# PROFILE_PRECISIONS (default "bf16 fp32"). ncu runs every kernel alone, so the sums are pure
# kernel time; the same run without ncu gives the step's wall time, and the difference is what
# the GPU spends idle between kernels (launch overhead, host waits).
# Prints per precision: kernels per step, kernel time per step, wall time per step, and the
# kernels by total time (name shortened to the function and its first template argument).
# Run on the GPU machine: bash tests/gpu/pack.sh BUNDLER here, copy .gpu/ there, then
#   bash .gpu/on-device.sh bash tests/gpu/profile.sh
# Usage: profile.sh [BUILD_DIR]; NCU (default: ncu on PATH or /usr/local/cuda/bin/ncu).
set -u
BUILD=${1:-build}
RUNTIME=$BUILD/runtime/dscpp-runtime GPT=$BUILD/examples/gpt/libgpt.so
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
LAYERS=${PROFILE_LAYERS:-2} STEPS=${PROFILE_STEPS:-2} TOP=${PROFILE_TOP:-25}
[ -x "$NCU" ] || { echo "profile.sh: no ncu at $NCU"; exit 1; }
WORK=$(mktemp -d /tmp/dscpp_profile.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SHAPE=(--layers "$LAYERS" --d_model 768 --heads 12 --context 1024 --sample_chars 0)
for p in ${PROFILE_PRECISIONS:-bf16 fp32}; do
  top=""
  [ "$p" = bf16 ] && top='"bf16": {"enabled": true},'
  cat > "$WORK/$p.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 1.0, $top
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0006, "weight_decay": 0.1}}}
JSON
  # Wall time per step: a longer run without the profiler (its rate after 2 untimed steps).
  "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/$p.json" --steps 12 --device cuda --no_eval -- "${SHAPE[@]}" \
    > "$WORK/$p.wall.log" 2>&1 || { echo "profile.sh: $p run failed:"; tail -5 "$WORK/$p.wall.log"; continue; }
  rate=$(grep 'after the first' "$WORK/$p.wall.log" | grep -o '[0-9.]* samples/s' | awk '{print $1}')
  "$NCU" --metrics gpu__time_duration.sum --csv --page raw --print-units base \
    "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/$p.json" --steps "$STEPS" --device cuda --no_eval -- \
    "${SHAPE[@]}" > "$WORK/$p.csv" 2> "$WORK/$p.ncu.err" || { echo "profile.sh: ncu $p failed:"; tail -5 "$WORK/$p.ncu.err"; }
  python3 - "$WORK/$p.csv" "$p" "$STEPS" "${rate:-0}" "$TOP" "$LAYERS" <<'PY'
import csv, re, sys
path, prec, steps, rate, top, layers = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
rows = [r for r in csv.reader(l for l in open(path, errors="replace") if l.startswith('"'))]
if not rows:
    print(f"{prec}: ncu wrote no kernels"); sys.exit()
head = rows[0]
ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
def short(name):  # namespaces, parameter lists and a leading "void" dropped
    name = re.sub(r"(\w+|\(anonymous namespace\)|<unnamed>)::", "", re.sub(r"^void ", "", name))
    return name.split("(")[0][:100]
tot, cnt = {}, {}
for r in rows[1:]:
    try: ns = float(r[ti].replace(",", ""))
    except (ValueError, IndexError): continue
    k = short(r[ki]); tot[k] = tot.get(k, 0) + ns; cnt[k] = cnt.get(k, 0) + 1
all_ns = sum(tot.values())
wall = 8 / rate * 1e3 if rate > 0 else 0
print(f"== {prec}, {layers} blocks: {sum(cnt.values()) / steps:.0f} kernels and {all_ns / steps / 1e6:.2f} ms of kernel time per step"
      f" (ncu, {steps} steps); wall {wall:.2f} ms per step without ncu")
for k, ns in sorted(tot.items(), key=lambda x: -x[1])[:top]:
    print(f"  {ns / steps / 1e3:9.1f} us/step {100 * ns / all_ns:5.1f}%  x{cnt[k] / steps:5.1f}  {k}")
PY
done
