#!/usr/bin/env bash
# Activation checkpointing (the `activation_checkpointing` section) on the gpt example:
#  1. weights and optimizer state after K steps (GAS 2) are bit for bit those of the run without
#     checkpointing (tolerance 0: a recompute is the same forward call on the same input with
#     the same context, so the same values): at stage 0 on 1 rank for every option (every
#     boundary, number_checkpoints 1 and 2, cpu_checkpointing, contiguous_memory_optimization,
#     partition_activations, synchronize_checkpoint_boundary, profile), at stage 3 on 2 ranks
#     (every boundary; number_checkpoints 1 with cpu_checkpointing) and bf16 at stage 2 on 2 ranks;
#  2. the activation peak the device measured (category activations) equals the plan the
#     engine printed before allocating, and both equal a closed form written here from the gpt's
#     declared sizes (runtime/model/activation_layout.h's segment rule); with a checkpoint at
#     every layer boundary the peak is at most 0.40 of the peak without checkpointing (measured
#     91392 / 233728 B = 0.391 for this 4-block gpt, micro-batch 2; number_checkpoints 2: 0.517,
#     1: 0.643 — fewer checkpoints, larger segments to hold while one is recomputed; the block
#     keeps 9 T×C tensors, so the layer-boundary checkpoints, one T×C each, weigh more than when
#     it kept 15);
#  3. cpu_checkpointing: the host's measured activation peak equals the planned checkpoint
#     bytes and the device's peak is lower by the checkpoints less one staging buffer;
#  4. a bad key or value in the section fails before training with the key named;
#  5. profile prints per-segment forward and recompute times at steps_per_print;
#  6. at stage 3 recomputing does not raise the gathered parameter peak.
# Usage: activation_checkpointing.sh DSCPP GPT_SO COMPARE
set -u
DSCPP=$1 GPT=$2 COMPARE=$3
WORK=$(mktemp -d /tmp/dscpp_actckpt.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
L=4 C=32 H=2 T=16 B=2 K=3
GPT_ARGS=(--layers $L --d_model $C --heads $H --context $T --sample_chars 0)

config() {  # FILE STAGE CKPT_BLOCK [PRECISION_BLOCK] (e.g. '"activation_checkpointing": {},' or '')
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $B, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "gradient_clipping": 1.0, $3 ${4:-}
 "zero_optimization": {"stage": $2, "stage3_param_persistence_threshold": 0},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}}}
JSON
}
train() {  # RANKS CONFIG LOG [runtime args]
  local ranks=$1 cfg=$2 log=$3
  shift 3
  "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$GPT" --deepspeed_config "$cfg" --steps $K --no_eval "$@" \
    -- "${GPT_ARGS[@]}" > "$log" 2>&1
}
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" "$1" | head -1; }  # LOG KEY → first KEY=N
measured() { sed -n 's/.*memory peak per rank (bytes):.* activations=\([0-9]*\),.*/\1/p' "$1" | head -1; }
host_measured() { sed -n 's/.*host memory peak per rank.* activations=\([0-9]*\)\/.*/\1/p' "$1" | head -1; }
norms() { grep -o 'grad norm [0-9.]*' "$1" | tr '\n' ' '; }

# The gpt's declared sizes per sample (examples/gpt/layers.cpp, fp32): outputs 4TC (embed, blocks)
# and 4TV (head); saved 0 (embed), 4(9TC + HT) + 16T (block: HT attention log-sum-exps; the LN
# and GELU outputs are made again in backward), 4TC + 8T + 4TV (head).
# expected V CKPTS HOST → "device host": the layout rule restated (segments of ⌊s·n/(k+1)⌋,
# 64-aligned pieces each followed by 64 guard bytes, the last segment not recomputed, two
# gradient buffers of the largest output, each with its guard).
expected() {
  awk -v L=$L -v C=$C -v H=$H -v T=$T -v b=$B -v V="$1" -v k="$2" -v host="$3" 'function al(x) { return int((x + 63) / 64) * 64 }
  BEGIN {
    n = L + 2
    for (l = 0; l < n; ++l) { out[l] = 4 * T * C; saved[l] = 4 * (9 * T * C + H * T) + 16 * T }
    saved[0] = 0; out[n - 1] = 4 * T * V; saved[n - 1] = 4 * T * C + 8 * T + 4 * T * V
    segs = (k < 0) ? 1 : k + 1; arena = 0; ck = 0; big = 0; maxout = 0
    for (s = 0; s < segs; ++s) {
      lo = int(s * n / segs); hi = int((s + 1) * n / segs); a = 0
      for (l = lo; l < hi; ++l) a += al(b * out[l]) + 64 + al(b * saved[l]) + 64
      if (a > arena) arena = a
      if (s > 0) { ck += b * out[lo - 1]; if (b * out[lo - 1] > big) big = b * out[lo - 1] }
    }
    for (l = 0; l < n; ++l) if (out[l] > maxout) maxout = out[l]
    grads = 2 * (b * maxout + 64)
    if (host) printf "%d %d", arena + big + grads, ck; else printf "%d 0", arena + ck + grads }'
}

# ---- runs -----------------------------------------------------------------------------------
declare -A BLOCK=(
  [none]=''
  [every]='"activation_checkpointing": {},'
  [k2]='"activation_checkpointing": {"number_checkpoints": 2, "contiguous_memory_optimization": true, "partition_activations": true, "synchronize_checkpoint_boundary": true, "profile": true},'
  [k1cpu]='"activation_checkpointing": {"number_checkpoints": 1, "cpu_checkpointing": true},'
  [cpu]='"activation_checkpointing": {"cpu_checkpointing": true, "contiguous_memory_optimization": true},'
)
declare -A KS=([none]=-1 [every]=$((L + 1)) [k2]=2 [k1cpu]=1 [cpu]=$((L + 1)))
declare -A HOST=([none]=0 [every]=0 [k2]=0 [k1cpu]=1 [cpu]=1)
for name in none every k2 k1cpu cpu; do
  config "$WORK/s0-$name.json" 0 "${BLOCK[$name]}"
  train 1 "$WORK/s0-$name.json" "$WORK/s0-$name.log" --save_dir "$WORK/s0-$name" ||
    fail "stage 0 $name: $(tail -3 "$WORK/s0-$name.log")"
done
for name in none every k1cpu; do
  config "$WORK/s3-$name.json" 3 "${BLOCK[$name]}"
  train 2 "$WORK/s3-$name.json" "$WORK/s3-$name.log" --save_dir "$WORK/s3-$name" ||
    fail "stage 3 $name: $(tail -3 "$WORK/s3-$name.log")"
done
# bf16 at stage 2 (16-bit parameters widened per layer, gradients through reduce-scatter staging).
BF16='"bf16": {"enabled": true},'
for name in none every; do
  config "$WORK/s2-$name.json" 2 "${BLOCK[$name]}" "$BF16"
  train 2 "$WORK/s2-$name.json" "$WORK/s2-$name.log" --save_dir "$WORK/s2-$name" ||
    fail "stage 2 bf16 $name: $(tail -3 "$WORK/s2-$name.log")"
done
V=$(sed -n 's/.*vocabulary \([0-9]*\),.*/\1/p' "$WORK/s0-none.log" | head -1)
[ -n "$V" ] || fail "no vocabulary size in the gpt's log"

# ---- 1. bit for bit ---------------------------------------------------------------------------
same() {  # LABEL A B: every tensor equal at tolerance 0
  local out
  out=$("$COMPARE" "$2" "$3" 2>&1) && pass "$1: bit for bit ($out)" || fail "$1 differs: $out"
}
step=global_step$K
for name in every k2 k1cpu cpu; do
  same "stage 0 $name: weights" "$WORK/s0-none/$step/model.safetensors" "$WORK/s0-$name/$step/model.safetensors"
  for f in "$WORK/s0-none/$step"/*optim*.safetensors; do
    same "stage 0 $name: $(basename "$f")" "$f" "$WORK/s0-$name/$step/$(basename "$f")"
  done
  [ "$(norms "$WORK/s0-none.log")" = "$(norms "$WORK/s0-$name.log")" ] && pass "stage 0 $name: the same grad norms" ||
    fail "stage 0 $name: grad norms $(norms "$WORK/s0-$name.log") vs $(norms "$WORK/s0-none.log")"
done
for run in s3-every s3-k1cpu s2-every; do
  ref=${run%-*}-none
  for f in "$WORK/$ref/$step"/*.safetensors; do
    same "$run: $(basename "$f")" "$f" "$WORK/$run/$step/$(basename "$f")"
  done
  [ "$(norms "$WORK/$ref.log")" = "$(norms "$WORK/$run.log")" ] && pass "$run: the same grad norms" ||
    fail "$run: grad norms differ"
done

# ---- 2./3. memory -----------------------------------------------------------------------------
declare -A DEVICE
for name in none every k2 k1cpu cpu; do
  log=$WORK/s0-$name.log
  read -r want_dev want_host <<< "$(expected "$V" "${KS[$name]}" "${HOST[$name]}")"
  plan=$(field "$log" 'per rank (bytes): device') got=$(measured "$log") plan_host=$(sed -n 's/.*planned activations per rank (bytes): device=[0-9]*, host=\([0-9]*\).*/\1/p' "$log")
  DEVICE[$name]=$got
  line="$name: device activations measured $got, planned $plan, closed form $want_dev"
  [ -n "$got" ] && [ "$got" = "$plan" ] && [ "$plan" = "$want_dev" ] && pass "$line" || fail "$line"
  if [ "${HOST[$name]}" = 1 ]; then
    got_host=$(host_measured "$log")
    line="$name: host activations measured $got_host, planned $plan_host, closed form $want_host"
    [ -n "$got_host" ] && [ "$got_host" = "$plan_host" ] && [ "$plan_host" = "$want_host" ] && pass "$line" || fail "$line"
  fi
done
ratio=$(awk -v a="${DEVICE[every]:-0}" -v b="${DEVICE[none]:-1}" 'BEGIN {printf "%.3f", a / b}')
awk -v r="$ratio" 'BEGIN {exit !(r > 0 && r <= 0.40)}' &&
  pass "a checkpoint at every boundary: activation peak ${DEVICE[every]} B = $ratio of ${DEVICE[none]} B without" ||
  fail "activation peak ratio $ratio (want ≤ 0.40)"
for name in k2 k1cpu; do
  pass "number_checkpoints ${KS[$name]}$([ "${HOST[$name]}" = 1 ] && echo ' (cpu)'): device activation peak ${DEVICE[$name]} B = $(awk -v a="${DEVICE[$name]:-0}" -v b="${DEVICE[none]:-1}" 'BEGIN {printf "%.3f", a / b}') of none"
done
[ "${DEVICE[cpu]:-0}" -lt "${DEVICE[every]:-0}" ] &&
  pass "cpu_checkpointing: device peak ${DEVICE[cpu]} B < ${DEVICE[every]} B with the checkpoints on the device" ||
  fail "cpu_checkpointing: device peak ${DEVICE[cpu]:-?} not below ${DEVICE[every]:-?}"
# Stage 3: a recompute gathers only its own layer, so checkpointing does not raise the gathered
# parameter peak (with a 20000-element prefetch window and no reuse, so that the windows matter).
params_peak() { sed -n 's/.*memory peak per rank (bytes): params=\([0-9]*\),.*/\1/p' "$1" | head -1; }
for name in none k2; do
  config "$WORK/p3-$name.json" 3 "${BLOCK[$name]}"
  sed -i 's/"stage": 3,/"stage": 3, "stage3_prefetch_bucket_size": 20000, "stage3_max_reuse_distance": 0,/' "$WORK/p3-$name.json"
  train 2 "$WORK/p3-$name.json" "$WORK/p3-$name.log" || fail "stage 3 prefetch $name: $(tail -3 "$WORK/p3-$name.log")"
done
p_none=$(params_peak "$WORK/p3-none.log") p_k2=$(params_peak "$WORK/p3-k2.log")
[ -n "$p_k2" ] && [ "$p_k2" -le "${p_none:-0}" ] &&
  pass "stage 3 gathered parameter peak with number_checkpoints 2: $p_k2 B, without checkpointing: $p_none B" ||
  fail "stage 3 gathered parameter peak with number_checkpoints 2: ${p_k2:-?} B > ${p_none:-?} B without"
# Stage 3 logs the same plan/measured pair.
for name in every k1cpu; do
  log=$WORK/s3-$name.log
  [ "$(measured "$log")" = "$(field "$log" 'per rank (bytes): device')" ] && pass "stage 3 $name: activations measured == planned ($(measured "$log") B)" ||
    fail "stage 3 $name: activations measured $(measured "$log") vs planned $(field "$log" 'per rank (bytes): device')"
done

# ---- 4. errors ----------------------------------------------------------------------------------
bad() {  # LABEL BLOCK PATTERN...
  local label=$1 block=$2
  shift 2
  config "$WORK/bad.json" 0 "$block"
  if train 1 "$WORK/bad.json" "$WORK/bad.log"; then
    fail "$label: accepted"
    return
  fi
  for p in "$@"; do grep -q -- "$p" "$WORK/bad.log" || { fail "$label: no '$p' in: $(grep -m2 -i 'error' "$WORK/bad.log")"; return; }; done
  pass "$label: $(grep -m1 -- "$1" "$WORK/bad.log" | cut -c1-220)"
}
bad "misspelled key" '"activation_checkpointing": {"number_checkpoint": 2},' number_checkpoint number_checkpoints
bad "number_checkpoints 0" '"activation_checkpointing": {"number_checkpoints": 0},' number_checkpoints
bad "more checkpoints than boundaries" '"activation_checkpointing": {"number_checkpoints": 9},' \
  "number_checkpoints: expected 1 to $((L + 1))" "found 9"
bad "cpu_checkpointing not a bool" '"activation_checkpointing": {"cpu_checkpointing": "maybe"},' cpu_checkpointing

# ---- 5. profile -------------------------------------------------------------------------------
n=$(grep -c 'activation checkpointing profile' "$WORK/s0-k2.log")
if [ "$n" = "$K" ] && grep -q 'segment 2 \[layers 4-5\] forward [0-9.]*' "$WORK/s0-k2.log" &&
  grep -q 'segment 0 \[layers 0-1\] forward [0-9.]* recompute [0-9.]*' "$WORK/s0-k2.log"; then
  pass "profile: $(grep -m1 'activation checkpointing profile' "$WORK/s0-k2.log" | sed 's/.*activation/activation/' | cut -c1-200)"
else
  fail "profile: $n lines for $K steps: $(grep -m1 'activation checkpointing profile' "$WORK/s0-k2.log")"
fi
grep -q "partition_activations: no-op" "$WORK/s0-k2.log" && pass "partition_activations is logged as a no-op" ||
  fail "partition_activations: no log line"

[ "$FAILED" = 0 ] && echo "activation_checkpointing: all checks passed"
exit "$FAILED"
