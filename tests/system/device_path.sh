#!/usr/bin/env bash
# The engine on a non-CPU device, through the real launcher, compared with the CPU device
# through consolidated checkpoints (dscpp zero-to-fp32) tensor by tensor and through the losses.
#
# DEVICE=cuda-sim (system suite, every machine) runs the CUDA code path on the CPU: the device
# math of kernels/cuda/cuda_math.cpp calling the CUDA kernels' own code through the host launch
# layer, every buffer checked to be device memory, and the CUDA ops table's host-stub build.
#  A. Engine and device math alone (DSCPP_SIM_OPS=cpu keeps the CPU ops table): the element
#     math is the CPU's (kernels/*_math.h) and the reductions (global norm, LAMB norms) only
#     reorder double sums, so weights must agree to 1e-6 after 8 steps at lr 2e-3 (measured:
#     0, bit for bit, in every case). Stages 0-3 on 2 ranks with GAS 2; bf16, fp16 with an
#     injected overflow skipped on every rank; Adam, LAMB, SGD with Nesterov momentum, Adagrad,
#     Lion; ZeRO++ qwZ + hpZ, qgZ (4 ranks as 2 nodes); activation checkpointing with
#     cpu_checkpointing; offload_optimizer cpu (stage 2), cpu with ratio 0.5 (stage 3, bf16) and
#     nvme (stage 3, fp16); offload_param cpu, alone and with offload_optimizer (bf16); ZeRO
#     stage 3 on 2 ranks vs stage 0 on 1 rank on the device.
#  B. The whole device path (the CUDA ops table too): its GEMMs are the CPU's bit for bit
#     (tests/unit/test_cuda_ops_table.cpp) but layer norm, softmax, attention and cross-entropy
#     sum in the GPU's order (≤ 6 u per op), which Adam amplifies where a gradient is near zero:
#     measured max |Δw| 2.2e-5, so 1e-4 — except c_attn.bias, whose key third has a true
#     gradient of exactly zero (tests/system/zero_train.sh), left out. The printed losses must
#     agree to 1e-3 (measured: identical at 4 decimals over 30 steps).
#  C. What crashed on the first GPU run, whole device path at B's tolerance: 1 rank at stages 1-3
#     and with offload (cpu at stages 1 and 2, nvme, offload_param), and 2 ranks over shm and
#     over gloo at stages 0-3 and stage 1 with offload (on a GPU: two ranks sharing it, their
#     device buffers staged through host memory).
# DEVICE=cuda (gpu suite) runs B and C on a GPU (cuBLAS, NCCL) at 1e-3; skipped (77) without a
# visible GPU. tests/gpu/check.sh is the one-GPU check. Both: a control with another learning rate must exceed the
# tolerance; --eval_only with offload_param gives the CPU's eval loss.
# Usage: device_path.sh DSCPP GPT_SO COMPARE DEVICE
set -u
DSCPP=$1 GPT=$2 COMPARE=$3 DEVICE=$4
# Under the sanitizers (DSCPP_TEST_SANITIZED=1: slow processes) the runs are for memory safety:
# only the device runs, of an A subset (listed at A) and of one B case (the CUDA ops table's
# memory safety is the unit test's under the sanitizers). The CPU twins, every comparison, the
# ZeRO equivalence and the control are the normal build's.
SANITIZED=${DSCPP_TEST_SANITIZED:-0}
# The comparisons are of the engine's device path, so the device's GEMMs stay exact fp32 in the
# bf16/fp16 cases too (by default those put the GEMMs on bf16/fp16 tensor-core math, whose
# operand rounding the unit tests check and tests/gpu/check.sh compares with the CPU separately).
export DSCPP_GEMM_MATH=fp32
# Likewise the layers compute in fp32 over the 16-bit parameters (the CUDA table would compute
# in bf16/fp16, whose activations differ from the CPU's fp32 ones by far more than B's
# tolerance); tests/unit/test_cuda_ops_16bit.cpp and zero_precision.sh cover 16-bit compute.
export DSCPP_COMPUTE_DTYPE=fp32
ATOL=1e-6                      # A
BTOL=1e-4                      # B
[ "$DEVICE" = cuda ] && BTOL=1e-3
WORK=$(mktemp -d /tmp/dscpp_device_path.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
. "$(dirname "$0")/train_compare.sh"  # config, max_loss_diff
GPT_ARGS=(--layers 2 --d_model 32 --heads 2 --context 16 --sample_chars 0)
# The probe and ZeRO-Inference evaluate a 64 KiB text: all of fortunes' eval split takes 76 s
# through the CUDA ops table's host build under the sanitizers.
head -c 65536 /usr/share/games/fortunes/computers > "$WORK/text.txt"
INF_ARGS=("${GPT_ARGS[@]}" --data "$WORK/text.txt")
STEPS=8

# run NAME CONFIG DEVICE RANKS [BACKEND]: trains and consolidates into $WORK/NAME.safetensors.
run() {
  "$DSCPP" --num_procs "$4" --master_port "$(port)" "$GPT" --deepspeed_config "$WORK/$2.json" --steps $STEPS \
    --no_eval --device "$3" --save_dir "$WORK/$1" ${5:+--comm_backend "$5"} -- "${GPT_ARGS[@]}" > "$WORK/$1.log" 2>&1 ||
    { fail "$1 ($3): training failed: $(grep -m3 -i error "$WORK/$1.log")"; return 1; }
  "$DSCPP" zero-to-fp32 "$WORK/$1" "$WORK/$1.safetensors" -q > "$WORK/$1.z2f.log" 2>&1 ||
    { fail "$1: zero-to-fp32: $(cat "$WORK/$1.z2f.log")"; return 1; }
}
# The CPU twin of a device run, and the comparison: numerics, so only in the normal build.
reference() { [ "$SANITIZED" = 1 ] || run "$@"; }
versus() { [ "$SANITIZED" = 1 ] || same "$@"; }
# same A B WHAT [TOL [compare args]]: the consolidated weights agree within TOL (default ATOL).
same() {
  local out a=$1 b=$2 what=$3 tol=${4:-$ATOL}
  shift 3
  [ $# -gt 0 ] && shift
  if out=$("$COMPARE" "$WORK/$a.safetensors" "$WORK/$b.safetensors" --atol "$tol" "$@" 2>&1); then
    pass "$what: $(echo "$out" | tail -1)"
  else
    fail "$what: $(echo "$out" | tail -3)"
  fi
}
# losses A B WHAT: the per-step losses of two logs agree within 1e-3, every step printed by both.
losses() {
  local d
  d=$(max_loss_diff "$WORK/$1.log" "$WORK/$2.log")
  if [ "$d" != none ] && awk -v d="${d% *}" 'BEGIN {exit !(d <= 1e-3)}'; then pass "$3: losses agree (max |Δloss| ${d% *})"
  else fail "$3: losses differ (max |Δloss|, steps: $d)"; fi
}

# The device must exist here; for cuda, a machine without a GPU skips the whole test.
config probe 0 1 "" "" "$ADAMW"
if ! "$DSCPP" --num_procs 1 --master_port "$(port)" "$GPT" --deepspeed_config "$WORK/probe.json" --steps 1 --no_eval \
  --device "$DEVICE" --save_dir "$WORK/probe" -- "${INF_ARGS[@]}" > "$WORK/probe.log" 2>&1; then
  if [ "$DEVICE" = cuda ] && grep -q -e "no CUDA device is visible" -e "built without CUDA" "$WORK/probe.log"; then
    echo "SKIP: --device cuda: $(grep -m1 -o -e 'no CUDA device is visible[^;]*' -e 'built without CUDA' "$WORK/probe.log")"
    exit 77
  fi
  echo "FAIL: --device $DEVICE does not start:"; tail -5 "$WORK/probe.log"; exit 1
fi
cp "$WORK/probe/global_step1/model.safetensors" "$WORK/probe-init.safetensors" 2> /dev/null ||
  fail "the probe run saved no model.safetensors"
grep -q "device $DEVICE" "$WORK/probe.log" && pass "the start-up line names device $DEVICE" ||
  fail "the start-up line does not name device $DEVICE: $(grep -m1 'dscpp-runtime' "$WORK/probe.log")"

F16='"fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 3, "hysteresis": 1},'
config s0 0 2 "" "" "$ADAMW"
config s1 1 2 "" "" "$ADAMW"
config s2bf16 2 2 '"bf16": {"enabled": true},' "" "$ADAMW"
config s3fp16 3 2 "$F16" "" "$ADAMW"
config lamb0 0 1 "" "" '{"type": "Lamb", "params": {"lr": 0.002, "weight_decay": 0.01}}'
config sgd2 2 1 "" "" '{"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9, "nesterov": true, "weight_decay": 0.001}}'
config adagrad3 3 1 "" "" '{"type": "Adagrad", "params": {"lr": 0.01, "initial_accumulator_value": 0.1}}'
config lion1 1 1 '"bf16": {"enabled": true},' "" '{"type": "Lion", "params": {"lr": 0.0002, "weight_decay": 0.1}}'
config zeropp 3 1 "" ', "zero_quantized_weights": true, "zero_hpz_partition_size": 2' "$ADAMW"
config ckpt 2 1 '"activation_checkpointing": {"cpu_checkpointing": true, "contiguous_memory_optimization": true},' \
  "" "$ADAMW"
config qgz 3 1 "" ', "zero_quantized_gradients": true' "$ADAMW"
# ZeRO-Offload: the reduced gradients cross to the host partition; the parameters come back.
config off2 2 2 "" ', "offload_optimizer": {"device": "cpu"}' "$ADAMW"
config off1 1 2 '"bf16": {"enabled": true},' ', "offload_optimizer": {"device": "cpu"}' "$ADAMW"
config off3r 3 2 '"bf16": {"enabled": true},' \
  ', "sub_group_size": 5000, "offload_optimizer": {"device": "cpu", "ratio": 0.5}' "$ADAMW"
mkdir -p "$WORK/nvme"
config off3n 3 2 "$F16" ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\"}" "$ADAMW"
# ZeRO-Infinity's parameter side: the homes are host memory, a GPU master is staged through it.
config par3 3 2 "" ', "offload_param": {"device": "cpu"}' "$ADAMW"
config par3b 3 2 '"bf16": {"enabled": true},' ', "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}' \
  "$ADAMW"
config z0 0 4 "" "" "$ADAMW"
config z3 3 2 "" "" "$ADAMW"

# ---- A: engine and device math alone (cuda-sim with the CPU ops table) -----------------------
if [ "$DEVICE" = cuda-sim ]; then
  export DSCPP_SIM_OPS=cpu
  CASES="s0 s1 s2bf16 s3fp16 lamb0 sgd2 adagrad3 lion1 zeropp ckpt off2 off3r off3n par3 par3b"
  # The subset: bf16 casts, int8 quantization, host copies, the offload crossing (+ qgZ's int4
  # and the fp16 overflow below); Lion's step under the sanitizers is test_device_math's.
  [ "$SANITIZED" = 1 ] && CASES="s2bf16 zeropp off3r par3"
  for c in $CASES; do
    reference "$c-cpu" "$c" cpu 2 && run "$c-A" "$c" "$DEVICE" 2 && versus "$c-cpu" "$c-A" "A $c: 2 ranks, $DEVICE = cpu"
  done
  # qgZ needs more than one node: 4 ranks as 2 nodes of 2.
  DSCPP_RANKS_PER_NODE=2 reference qgz-cpu qgz cpu 4 && DSCPP_RANKS_PER_NODE=2 run qgz-A qgz "$DEVICE" 4 &&
    versus qgz-cpu qgz-A "A qgZ (int4 two-hop reduce-scatter), 4 ranks as 2 nodes"
  grep -q "qgz-cross" "$WORK/qgz-A.log" && pass "A qgZ's cross-node hop ran" ||
    fail "A qgZ: no qgz-cross traffic line in the log: the quantized path did not run"
  # An injected overflow: the last rank writes inf into its gradients from the host; every rank
  # skips that step (the flag read back from the device, agreed across ranks).
  DSCPP_INJECT_OVERFLOW=3 reference inject-cpu s3fp16 cpu 2 && DSCPP_INJECT_OVERFLOW=3 run inject-A s3fp16 "$DEVICE" 2 &&
    versus inject-cpu inject-A "A injected overflow at step 3, stage 3 fp16"
  grep -q "step $STEPS/$STEPS .*| skipped 1" "$WORK/inject-A.log" && pass "A the injected overflow skipped 1 step" ||
    fail "A expected 1 skipped step: $(grep "step $STEPS/$STEPS" "$WORK/inject-A.log")"
  unset DSCPP_SIM_OPS
fi

# ---- B: the whole device path ---------------------------------------------------------------
# On a machine with one GPU the ranks share it, which nccl refuses: B runs over shm there.
SHARED=""
[ "$DEVICE" = cuda ] && [ "$(ls /dev/nvidia[0-9]* 2> /dev/null | wc -l)" -lt 2 ] && SHARED=shm
SKIP_BIAS=(--skip c_attn.bias)
BCASES="s1 s3fp16 zeropp ckpt off3r"
[ "$SANITIZED" = 1 ] && BCASES="s3fp16"
for c in $BCASES; do
  [ -e "$WORK/$c-cpu.safetensors" ] || reference "$c-cpu" "$c" cpu 2 || continue
  run "$c-B" "$c" "$DEVICE" 2 $SHARED || continue
  [ "$SANITIZED" = 1 ] && continue
  same "$c-cpu" "$c-B" "B $c: 2 ranks, $DEVICE = cpu" "$BTOL" "${SKIP_BIAS[@]}" && losses "$c-cpu" "$c-B" "B $c"
done
# The table's tiled attention kernels (DSCPP_FLASH_ATTENTION=tiled) in place of the blockwise path.
if [ "$SANITIZED" != 1 ] && DSCPP_FLASH_ATTENTION=tiled run s1-tiled s1 "$DEVICE" 2 $SHARED; then
  same s1-cpu s1-tiled "B s1, tiled attention: 2 ranks, $DEVICE = cpu" "$BTOL" "${SKIP_BIAS[@]}" &&
    losses s1-cpu s1-tiled "B s1, tiled attention"
fi

# ---- C: what crashed on the first GPU run (host code on device memory; cuda-sim's memory is now
# unreachable from host code, so each of these failed here too before the fix) -------------------
# One rank at stages 1-3 and with offload: the one-rank group's copies stay on the device.
CCASES1="s1 off1 s2bf16 s3fp16 off2 off3n par3"
[ "$SANITIZED" = 1 ] && CCASES1="s3fp16 off3n"
for c in $CCASES1; do
  reference "$c-cpu1" "$c" cpu 1 || continue
  run "$c-C1" "$c" "$DEVICE" 1 || continue
  [ "$SANITIZED" = 1 ] && continue
  same "$c-cpu1" "$c-C1" "C $c: 1 rank, $DEVICE = cpu" "$BTOL" "${SKIP_BIAS[@]}" && losses "$c-cpu1" "$c-C1" "C $c, 1 rank"
done
# Two ranks over the host engines (one GPU shared, on a real device): device buffers staged.
CCASES2="s0 s1 off1 s2bf16 s3fp16"
[ "$SANITIZED" = 1 ] && CCASES2="s2bf16"
for backend in shm gloo; do
  for c in $CCASES2; do
    [ -e "$WORK/$c-cpu.safetensors" ] || reference "$c-cpu" "$c" cpu 2 || continue
    run "$c-$backend" "$c" "$DEVICE" 2 "$backend" || continue
    [ "$SANITIZED" = 1 ] && continue
    same "$c-cpu" "$c-$backend" "C $c: 2 ranks over $backend, $DEVICE = cpu" "$BTOL" "${SKIP_BIAS[@]}" &&
      losses "$c-cpu" "$c-$backend" "C $c over $backend"
  done
done

if [ "$SANITIZED" = 1 ]; then
  echo "sanitized build: B's qgZ, the ZeRO equivalence and the control run in the normal build"
else
  # qgZ's int4 bins turn tiny differences into whole quantization steps, so only its losses.
  if [ -e "$WORK/qgz-cpu.log" ] || DSCPP_RANKS_PER_NODE=2 run qgz-cpu qgz cpu 4; then
    DSCPP_RANKS_PER_NODE=2 run qgz-B qgz "$DEVICE" 4 ${SHARED:+hierarchical} && losses qgz-cpu qgz-B "B qgZ, 4 ranks as 2 nodes"
  fi
  # ZeRO on the device itself: stage 3 on 2 ranks reproduces stage 0 on 1 rank with the same
  # global batch (GAS doubles); partitions reorder fp32 sums (zero_train.sh: ≤ 1.2e-7 in 6 steps).
  run z0-B z0 "$DEVICE" 1 && run z3-B z3 "$DEVICE" 2 $SHARED &&
    same z0-B z3-B "B $DEVICE: stage 3 x 2 ranks = stage 0 x 1 rank" "$BTOL" "${SKIP_BIAS[@]}"

  # Control: another learning rate must exceed the tolerances, or the comparisons show nothing.
  sed 's/"lr": 0.002/"lr": 0.0021/' "$WORK/s1.json" > "$WORK/ctl.json"
  if run ctl-B ctl "$DEVICE" 2 $SHARED; then
    if "$COMPARE" "$WORK/s1-cpu.safetensors" "$WORK/ctl-B.safetensors" --atol "$BTOL" "${SKIP_BIAS[@]}" > "$WORK/ctl.txt" 2>&1
    then
      fail "control: lr 0.0021 on $DEVICE is within $BTOL of lr 0.002 on cpu: the comparison cannot fail"
    else
      pass "control: lr 0.0021 differs beyond $BTOL ($(tail -1 "$WORK/ctl.txt"))"
    fi
  fi
fi

# ZeRO-Inference on the device: stage 3 with offload_param, forward only, the same eval loss.
cat > "$WORK/inf.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
JSON
INF_DEVICES="cpu $DEVICE"
[ "$SANITIZED" = 1 ] && INF_DEVICES=$DEVICE
for d in $INF_DEVICES; do
  "$DSCPP" --num_procs 2 --master_port "$(port)" "$GPT" --deepspeed_config "$WORK/inf.json" --eval_only \
    --init_from "$WORK/probe-init.safetensors" --device "$d" ${SHARED:+--comm_backend $SHARED} -- "${INF_ARGS[@]}" \
    > "$WORK/inf-$d.log" 2>&1 ||
    fail "eval_only on $d: $(grep -m2 -i error "$WORK/inf-$d.log")"
done
[ "$SANITIZED" = 1 ] && exit $FAILED
a=$(grep -o 'eval only: loss [0-9.]*' "$WORK/inf-cpu.log") b=$(grep -o 'eval only: loss [0-9.]*' "$WORK/inf-$DEVICE.log")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "ZeRO-Inference with offload_param on $DEVICE: $b, as on cpu" ||
  fail "ZeRO-Inference: cpu '$a', $DEVICE '$b'"

exit $FAILED
