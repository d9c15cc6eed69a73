#!/usr/bin/env bash
# Parameter offload (zero_optimization.offload_param cpu | nvme, ZeRO stage 3) and ZeRO-Inference
# (--eval_only), end to end through the launcher on a 3-block gpt whose blocks' slices exceed the
# 1 MiB NVMe swap minimum (so NVMe really swaps: max_in_cpu 0, 3 buffers for 5 groups):
#  1. training on 2 ranks with offload_param cpu and nvme ends with exactly the weights of the same
#     run without offload, fp32 and bf16: master weights, Adam moments and the gathered 16-bit
#     parameters (stage3_gather_16bit_weights_on_model_save, read from the offloaded slices) bit
#     for bit, and the same loss at every step; resuming from a checkpoint into NVMe-offloaded
#     parameters, and with offload_optimizer nvme too, likewise. Exact is the right tolerance:
#     offload moves the same bytes, it changes no arithmetic. Control: fp32 and bf16 runs differ
#     under the same check;
#  2. the device's parameter peak with offload (no prefetch, no reuse) is the one gathered layer
#     the plan predicts, and without offload it is that plus this rank's partitions;
#  3. --eval_only at stage 3 with offload_param cpu / nvme under a --device_memory_limit below the
#     model's own size gives the eval loss of an unpartitioned, non-offloaded single-rank run, from
#     the checkpoint and from its consolidated safetensors; the same limit without offload fails
#     (control), and no gradient or optimizer memory is allocated;
#  4. offload_param below stage 3 trains (ignored, with a warning), and a bad nvme_path, or
#     --load_dir together with --init_from, fails with a message naming what is wrong.
# Usage: zero_inference.sh DSCPP RUNTIME GPT_SO COMPARE
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3 COMPARE=$4
WORK=$(mktemp -d /tmp/dscpp_zero_inference.XXXXXX)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
SANITIZED=${DSCPP_TEST_SANITIZED:-0}

# A small deterministic text (a fixed vocabulary and ~1100 eval windows keep evaluation short).
awk 'BEGIN { split("the of and a to in is you that it he was for on are as with his they at be this from", w, " ");
  x = 7; s = ""; while (length(s) < 12000) { x = (x * 1103515245 + 12345) % 2147483648; s = s w[int(x / 65536) % 25 + 1] (x % 7 ? " " : ".\n") }
  printf "%s", s }' > "$WORK/text.txt"
GPT_ARGS=(-- --layers 3 --d_model 320 --heads 4 --context 16 --sample_chars 0 --data "$WORK/text.txt")
desc=$("$RUNTIME" --model "$GPT" --describe_model "${GPT_ARGS[@]}" 2>/dev/null)
PSI=$(sed -n 's/.*"total_params": \([0-9]*\).*/\1/p' <<< "$desc")
LARGEST=$(sed -n 's/.*"largest_layer_params": \([0-9]*\).*/\1/p' <<< "$desc")
[ -n "$PSI" ] && [ -n "$LARGEST" ] || { echo "FAIL: --describe_model gave no counts: $desc"; exit 1; }
echo "model: Ψ = $PSI parameters ($((PSI * 4)) bytes in fp32), largest layer $LARGEST"
mkdir -p "$WORK/nvme"

# config FILE STAGE PRECISION OFFLOAD [EXTRA ZERO KEYS]: OFFLOAD is none, cpu or nvme.
config() {
  local prec='' off=''
  [ "$3" = bf16 ] && prec='"bf16": {"enabled": true},'
  [ "$4" = cpu ] && off=', "offload_param": {"device": "cpu"}'
  [ "$4" = nvme ] &&
    off=', "offload_param": {"device": "nvme", "nvme_path": "'"$WORK/nvme"'", "max_in_cpu": 0, "buffer_count": 3}'
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 1, $prec
 "zero_optimization": {"stage": $2, "stage3_param_persistence_threshold": 0,
   "stage3_gather_16bit_weights_on_model_save": true ${5:-} $off},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}}}
JSON
}
run() {  # RANKS CONFIG LOG [runtime args]
  local ranks=$1 cfg=$2 log=$3
  shift 3
  "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$GPT" --deepspeed_config "$cfg" "$@" "${GPT_ARGS[@]}" > "$log" 2>&1
}
losses() { sed -n 's/.*step \([0-9]*\)\/[0-9]* | loss \([0-9.]*\).*/\1 \2/p' "$1"; }
same() {  # A B: every tensor of every rank file and the 16-bit weights, bit for bit
  local f out
  for f in zero_pp_rank_0_partitions zero_pp_rank_1_partitions model_16bit/model; do
    out=$("$COMPARE" "$1/$f.safetensors" "$2/$f.safetensors" 2>&1) || { echo "$f: $out"; return 1; }
  done
}

# ---- 1. training with offload == without, fp32 and bf16 ------------------------------------
STEPS=2
PRECS="fp32 bf16"
for prec in $PRECS; do
  for off in none cpu nvme; do
    # Sanitized runs are slow: the NVMe path in fp32, the cpu path in bf16, against their references.
    [ "$SANITIZED" = 1 ] && [ "$prec:$off" = fp32:cpu -o "$prec:$off" = bf16:nvme ] && continue
    config "$WORK/t-$prec-$off.json" 3 "$prec" "$off" ', "stage3_prefetch_bucket_size": 2000000'
    run 2 "$WORK/t-$prec-$off.json" "$WORK/t-$prec-$off.log" --steps $STEPS --no_eval --save_dir "$WORK/t-$prec-$off" ||
      { fail "train $prec offload $off: $(tail -3 "$WORK/t-$prec-$off.log")"; continue; }
    [ "$off" = none ] && continue
    ref=$WORK/t-$prec-none/global_step$STEPS got=$WORK/t-$prec-$off/global_step$STEPS
    if out=$(same "$ref" "$got"); then
      pass "train $prec, offload_param $off: master weights, moments and 16-bit parameters bit for bit"
    else
      fail "train $prec, offload_param $off differs from no offload: $out"
    fi
    [ "$(losses "$WORK/t-$prec-$off.log")" = "$(losses "$WORK/t-$prec-none.log")" ] &&
      [ -n "$(losses "$WORK/t-$prec-none.log")" ] && pass "train $prec, offload_param $off: same loss at every step" ||
      fail "train $prec, offload_param $off: losses $(losses "$WORK/t-$prec-$off.log" | tr '\n' ' ') vs $(losses "$WORK/t-$prec-none.log" | tr '\n' ' ')"
  done
done
# Resuming into offloaded slices: one more step from the no-offload checkpoint, with and without NVMe.
if [ "$SANITIZED" != 1 ]; then
  for off in none nvme; do
    run 2 "$WORK/t-fp32-$off.json" "$WORK/r-$off.log" --steps $((STEPS + 1)) --no_eval --load_dir "$WORK/t-fp32-none" \
      --save_dir "$WORK/r-$off" || fail "resume with offload $off: $(tail -3 "$WORK/r-$off.log")"
  done
  out=$(same "$WORK/r-none/global_step$((STEPS + 1))" "$WORK/r-nvme/global_step$((STEPS + 1))") &&
    pass "resume from a checkpoint into NVMe-offloaded parameters: bit for bit after one more step" ||
    fail "resume into NVMe-offloaded parameters differs: $out"
fi
# With the optimizer offloaded as well (ZeRO-Infinity: both on NVMe), bf16: still bit for bit.
if [ "$SANITIZED" != 1 ]; then
  mkdir -p "$WORK/nvme-opt"
  config "$WORK/t-inf.json" 3 bf16 nvme \
    ', "stage3_prefetch_bucket_size": 2000000, "offload_optimizer": {"device": "nvme", "nvme_path": "'"$WORK/nvme-opt"'"}'
  run 2 "$WORK/t-inf.json" "$WORK/t-inf.log" --steps $STEPS --no_eval --save_dir "$WORK/t-inf" &&
    out=$(same "$WORK/t-bf16-none/global_step$STEPS" "$WORK/t-inf/global_step$STEPS") &&
    pass "train bf16, offload_param and offload_optimizer both nvme: bit for bit" ||
    fail "train bf16, both offloads on nvme: ${out:-$(tail -3 "$WORK/t-inf.log")}"
fi
# NVMe really held the slices, and the swap directory went away with the job.
nv=$(sed -n 's/.*parameters off the device per rank (bytes): host=[0-9]*, nvme=\([0-9]*\),.*/\1/p' "$WORK/t-fp32-nvme.log")
[ "${nv:-0}" -gt $((PSI * 4 / 2 * 9 / 10)) ] && pass "nvme: $nv bytes of rank 0's parameters were on NVMe" ||
  fail "nvme: expected most of rank 0's $((PSI * 2)) parameter bytes on NVMe, log says '${nv:-nothing}'"
[ -z "$(ls -A "$WORK/nvme")" ] && pass "nvme: swap directory removed at exit" || fail "nvme: left behind: $(ls -A "$WORK/nvme")"
# Control: the comparison sees a real difference (fp32 vs bf16 weights after the same steps).
same "$WORK/t-fp32-none/global_step$STEPS" "$WORK/t-bf16-none/global_step$STEPS" > /dev/null &&
  fail "control: fp32 and bf16 runs compared equal (the comparison cannot fail)" || pass "control: fp32 and bf16 runs differ"

# ---- 2. device parameter peak: the live layer ----------------------------------------------
# peak LOG → measured params peak and planned device params of rank 0
peak() { sed -n 's/.*memory peak per rank (bytes): params=\([0-9]*\),.*/\1/p' "$1"; }
planned() { sed -n 's/.*planned device params=\([0-9]*\).*/\1/p' "$1"; }
NOPF=', "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0'
config "$WORK/m-off.json" 3 fp32 cpu "$NOPF"
config "$WORK/m-none.json" 3 fp32 none "$NOPF"
run 2 "$WORK/m-off.json" "$WORK/m-off.log" --steps 1 --no_eval || fail "memory run (cpu): $(tail -3 "$WORK/m-off.log")"
run 2 "$WORK/m-none.json" "$WORK/m-none.log" --steps 1 --no_eval || fail "memory run (none): $(tail -3 "$WORK/m-none.log")"
got=$(peak "$WORK/m-off.log") plan=$(planned "$WORK/m-off.log") base=$(peak "$WORK/m-none.log")
# The gathered layer is the largest block padded to a multiple of 2 ranks × 16 elements.
if [ -n "$got" ] && [ -n "$plan" ] && [ "$got" -le "$plan" ] && [ "$got" -ge $((LARGEST * 4)) ] &&
  [ "$got" -le $(((LARGEST + 64) * 4)) ]; then
  pass "offload_param cpu: device params peak $got B = one gathered layer ($((LARGEST * 4)) B + padding), plan $plan B"
else
  fail "offload_param cpu: device params peak '${got:-?}' B, plan '${plan:-?}' B, one layer is $((LARGEST * 4)) B"
fi
# The partitions went to the host instead: measured there as planned, half the model per rank.
hp=$(sed -n 's/.*host memory peak per rank (bytes, measured\/planned): params=\([0-9]*\)\/\([0-9]*\),.*/\1 \2/p' "$WORK/m-off.log")
[ -n "$hp" ] && [ "${hp% *}" = "${hp#* }" ] && [ "${hp% *}" -ge $((PSI * 4 / 2)) ] &&
  pass "offload_param cpu: host holds ${hp% *} B of parameters, as planned" ||
  fail "offload_param cpu: host parameters measured/planned '${hp:-?}', expected equal and ≥ $((PSI * 2)) B"
[ -n "$base" ] && [ -n "$got" ] && [ "$((base - got))" -ge $((PSI * 4 / 2)) ] &&
  pass "without offload the params peak is $base B: this rank's partitions ($((base - got)) B) more" ||
  fail "without offload the params peak is '${base:-?}' B, with '${got:-?}' B: expected ≥ $((PSI * 2)) B more"

# ---- 3. --eval_only (ZeRO-Inference) -------------------------------------------------------
CKPT=$WORK/t-fp32-none
"$DSCPP" zero-to-fp32 "$CKPT/global_step$STEPS" "$WORK/weights.safetensors" -q > "$WORK/z2f.log" 2>&1 ||
  fail "zero-to-fp32: $(cat "$WORK/z2f.log")"
evloss() { sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$1"; }
cat > "$WORK/e-ref.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 0}}
JSON
run 1 "$WORK/e-ref.json" "$WORK/e-ref.log" --eval_only --load_dir "$CKPT" || fail "eval reference: $(tail -3 "$WORK/e-ref.log")"
REF=$(evloss "$WORK/e-ref.log")
echo "reference eval loss (stage 0, 1 rank, no limit): ${REF:-?}"
# A language model's eval line also gives the perplexity, exp(loss).
ppl=$(sed -n 's/.*eval only: loss [0-9.]*, accuracy [0-9.]*%, perplexity \([0-9.]*\) .*/\1/p' "$WORK/e-ref.log")
[ -n "$ppl" ] && [ -n "$REF" ] && awk -v p="$ppl" -v l="$REF" 'BEGIN { e = exp(l); exit !((p - e) ^ 2 <= (1e-4 * e) ^ 2) }' &&
  pass "the eval line gives perplexity $ppl = exp($REF)" || fail "perplexity '${ppl:-?}' is not exp(${REF:-?})"
# Below the model's own fp32 size; above one layer + activations of micro-batch 4 (~10 MB).
LIMIT=$((PSI * 4 * 8 / 10))
ecfg() {  # FILE OFFLOAD: stage 3, no prefetch, only the layer in use on the device; no optimizer section
  local off=''
  [ "$2" = cpu ] && off=', "offload_param": {"device": "cpu"}'
  [ "$2" = nvme ] && off=', "offload_param": {"device": "nvme", "nvme_path": "'"$WORK/nvme"'", "max_in_cpu": 0, "buffer_count": 3}'
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
  "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0 $off}}
JSON
}
# Loss lines print 6 decimals; the runs compute the same per-sample forward in fp32, summed in
# a different order over ranks (~1e-7 relative): 2e-6 is two units of the printed precision.
close() { awk -v a="$1" -v b="$2" 'BEGIN {d = a - b; exit !(a != "" && b != "" && d <= 2e-6 && d >= -2e-6)}'; }
CASES="cpu:ckpt nvme:ckpt cpu:st nvme:st"
[ "$SANITIZED" = 1 ] && CASES="nvme:ckpt cpu:st"
for c in $CASES; do
  off=${c%:*} src=${c#*:}
  ecfg "$WORK/e-$off.json" "$off"
  if [ "$src" = ckpt ]; then from=(--load_dir "$CKPT"); else from=(--init_from "$WORK/weights.safetensors"); fi
  log=$WORK/e-$off-$src.log
  run 2 "$WORK/e-$off.json" "$log" --eval_only "${from[@]}" --device_memory_limit "$LIMIT" ||
    { fail "eval_only $off from $src under $LIMIT B: $(grep -m2 error "$log")"; continue; }
  l=$(evloss "$log")
  close "$l" "$REF" && pass "eval_only, offload_param $off, weights from $src, device limit $LIMIT B < model $((PSI * 4)) B: loss $l" ||
    fail "eval_only, offload_param $off, weights from $src: loss '${l:-?}' vs reference '${REF:-?}'"
  g=$(sed -n 's/.*memory peak per rank (bytes): params=\([0-9]*\), grads=\([0-9]*\), optimizer_state=\([0-9]*\),.*/\1 \2 \3/p' "$log")
  read -r pp gg oo <<< "$g"
  [ "$gg $oo" = "0 0" ] && [ "${pp:-0}" -ge $((LARGEST * 4)) ] && [ "${pp:-0}" -le $(((LARGEST + 64) * 4)) ] &&
    pass "eval_only $off/$src: device params peak $pp B = one layer; no gradient or optimizer memory" ||
    fail "eval_only $off/$src: params, grads, optimizer state peaks = '$g' (one layer is $((LARGEST * 4)) B)"
done
# bf16 inference: the offloaded stage-3 run rounds the same fp32 weights as a stage-0 bf16 run
# (no limit: the fp32 view of a bf16 layer plus activations leave no room below the bf16 model size).
if [ "$SANITIZED" != 1 ]; then
  sed 's/"stage": 0}/"stage": 0}, "bf16": {"enabled": true}/' "$WORK/e-ref.json" > "$WORK/e-ref16.json"
  sed 's/^{/{"bf16": {"enabled": true}, /' "$WORK/e-nvme.json" > "$WORK/e-nvme16.json"
  run 1 "$WORK/e-ref16.json" "$WORK/e-ref16.log" --eval_only --load_dir "$CKPT" &&
    run 2 "$WORK/e-nvme16.json" "$WORK/e-nvme16.log" --eval_only --load_dir "$CKPT" &&
    close "$(evloss "$WORK/e-nvme16.log")" "$(evloss "$WORK/e-ref16.log")" &&
    pass "eval_only bf16 nvme: loss $(evloss "$WORK/e-nvme16.log") = stage-0 bf16 $(evloss "$WORK/e-ref16.log")" ||
    fail "eval_only bf16: $(evloss "$WORK/e-nvme16.log") vs $(evloss "$WORK/e-ref16.log"); $(grep -m1 error "$WORK"/e-*16.log)"
fi
# Control: the same limit without offload (partitions stay on the device) runs out of memory.
ecfg "$WORK/e-none.json" none
if run 2 "$WORK/e-none.json" "$WORK/e-none.log" --eval_only --load_dir "$CKPT" --device_memory_limit "$LIMIT"; then
  fail "control: stage 3 without offload fit under $LIMIT B (the limit proves nothing)"
else
  grep -q "out of memory" "$WORK/e-none.log" && grep -q -- "--eval_only: this rank needs its gathered layers" "$WORK/e-none.log" &&
    pass "control: without offload_param the same limit runs out of memory, with inference advice" ||
    fail "control: no clear out-of-memory message: $(grep -m2 error "$WORK/e-none.log")"
fi

# ---- 4. below stage 3, and errors ----------------------------------------------------------
config "$WORK/s2-cpu.json" 2 fp32 cpu
config "$WORK/s2-none.json" 2 fp32 none
run 2 "$WORK/s2-cpu.json" "$WORK/s2-cpu.log" --steps 1 --no_eval --save_dir "$WORK/s2-cpu" &&
  run 2 "$WORK/s2-none.json" "$WORK/s2-none.log" --steps 1 --no_eval --save_dir "$WORK/s2-none" &&
  grep -q "warning: zero_optimization.offload_param: parameter offload works only with ZeRO stage 3 (stage is 2): ignored" "$WORK/s2-cpu.log" &&
  [ "$(grep -c "offload_param works only\|parameter offload works only" "$WORK/s2-cpu.log")" = 1 ] &&
  "$COMPARE" "$WORK/s2-cpu/global_step1/zero_pp_rank_0_partitions.safetensors" \
    "$WORK/s2-none/global_step1/zero_pp_rank_0_partitions.safetensors" > /dev/null 2>&1 &&
  pass "stage 2 with offload_param: one warning, trains exactly as without" ||
  fail "stage 2 with offload_param: $(grep -m2 "offload_param\|error" "$WORK/s2-cpu.log")"
expect_error() {  # NAME PATTERN CONFIG [runtime args]: the run fails and says PATTERN
  local name=$1 pattern=$2 cfg=$3
  shift 3
  if run 2 "$cfg" "$WORK/err.log" "$@"; then
    fail "$name: the run succeeded"
  elif grep -q -- "$pattern" "$WORK/err.log"; then
    pass "$name: $(grep -m1 -- "$pattern" "$WORK/err.log" | cut -c1-160)"
  else
    fail "$name: expected '$pattern', got: $(grep -m2 -i error "$WORK/err.log")"
  fi
}
ecfg "$WORK/bad.json" nvme
sed "s|$WORK/nvme|$WORK/missing|" "$WORK/bad.json" > "$WORK/bad-missing.json"
expect_error "nvme_path missing" "zero_optimization.offload_param: nvme_path $WORK/missing does not exist" "$WORK/bad-missing.json" --eval_only
# Not writable: a read-only directory (root writes anyway, so then a path under /proc).
ro=$WORK/readonly
mkdir -p "$ro" && chmod 555 "$ro"
[ "$(id -u)" = 0 ] && ro=/proc/self
sed "s|$WORK/nvme|$ro|" "$WORK/bad.json" > "$WORK/bad-ro.json"
expect_error "nvme_path not writable" "zero_optimization.offload_param: nvme_path $ro is not writable" "$WORK/bad-ro.json" --eval_only
sed 's|, "nvme_path": "[^"]*"||' "$WORK/bad.json" > "$WORK/bad-nopath.json"
expect_error "nvme without nvme_path" 'zero_optimization.offload_param.nvme_path: device "nvme" needs nvme_path' "$WORK/bad-nopath.json" --eval_only
expect_error "--load_dir with --init_from" "give the weights once" "$WORK/e-cpu.json" --eval_only --load_dir "$CKPT" \
  --init_from "$WORK/weights.safetensors"

[ "$FAILED" = 0 ] && echo "zero_inference: all checks passed"
exit "$FAILED"
