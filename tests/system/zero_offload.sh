#!/usr/bin/env bash
# zero_optimization.offload_optimizer (ZeRO-Offload / ZeRO-Infinity for optimizer state) end to
# end on a small gpt:
#  1. parity: offload cpu at stages 1, 2, 3 and nvme at stage 3 (several sub-groups, with and
#     without pipeline_read/pipeline_write) leave every rank's checkpoint (fp32 master, Adam
#     moments) bit-identical to the run without offload, in fp32 and bf16. Offload only moves
#     where the same fp32 arithmetic happens (the same kernels on the same values in the same
#     order), so the tolerance is zero;
#  2. memory: with offload cpu the device holds no optimizer state and its peak drops by at
#     least the optimizer-state peak of the run without offload; the host's optimizer-state
#     peak equals the plan;
#  3. NVMe: checkpoints save and resume bit for bit, a 2-rank checkpoint reshards onto 1 rank;
#     the process's peak RSS (VmHWM) stays below the cpu-offload run's by at least a third of
#     the optimizer state it keeps on NVMe instead (measured: a little over half, 20 of 37 MiB;
#     at half the check failed now and then by 1 MiB of allocator noise), while that state is
#     ≥ 4× the swap buffers;
#  4. errors: nvme_path missing, unwritable, on a full disk; the swap file removed during
#     training (the run stops naming the file, and the last checkpoint loads); offload at
#     stage 0, NVMe at stage 2, ratio < 1 below stage 3, ratio outside [0, 1], too few buffers;
#     pin_memory beyond the memlock limit warns and trains unpinned;
#  5. partial offload (offload_optimizer ratio < 1, stage 3): ratios 0.5, 0 and one giving a
#     single offloaded sub-group, cpu and nvme, are bit-identical to the run without offload
#     (in part 1); the device's measured optimizer-state peak equals the plan's device share
#     and lies strictly between the ratio-0 and the full-offload runs'; a checkpoint saved with
#     ratio 0.5 resumes with ratio 1 and vice versa, bit for bit.
# Usage: zero_offload.sh DSCPP RUNTIME GPT_SO COMPARE
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3 COMPARE=$4
WORK=$(mktemp -d /tmp/dscpp_zero_offload.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
GPT_ARGS=(--layers 3 --d_model 32 --heads 2 --context 16 --sample_chars 0)
K=4
SANITIZED=${DSCPP_TEST_SANITIZED:-0}

# config FILE STAGE PREC OFFLOAD_JSON: AdamW with weight decay, clipping, 2 micro-steps per
# step (gradients accumulate in the host partition when offloaded); stage 3 in sub-groups of
# 3000 elements so that NVMe swaps several of them per step.
config() {
  local half="" off=""
  [ "$3" = bf16 ] && half='"bf16": {"enabled": true},'
  [ -n "$4" ] && off=", \"offload_optimizer\": $4"
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 2,
 "gradient_clipping": 1.0, $half
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 20000, "sub_group_size": 3000,
   "stage3_param_persistence_threshold": 0 $off},
 "aio": {"block_size": 65536, "queue_depth": 4},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}}}
JSON
}
train() {  # RANKS CONFIG LOG [runtime args...]
  local ranks=$1 cfg=$2 log=$3
  shift 3
  "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$GPT" --deepspeed_config "$cfg" --no_eval "$@" -- \
    "${GPT_ARGS[@]}" > "$log" 2>&1
}
# same_ckpt A B: every rank's partition file identical, bit for bit.
same_ckpt() {
  local a=$1 b=$2 f out
  for f in "$a"/zero_pp_rank_*_partitions.safetensors; do
    out=$("$COMPARE" "$f" "$b/$(basename "$f")" 2>&1) || { echo "$(basename "$f"): $out"; return 1; }
  done
}
mkdir -p "$WORK/nvme"
CPU='{"device": "cpu"}'
NVME="{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\"}"
NVME_PIPE="{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\", \"pipeline_read\": true, \"pipeline_write\": true, \"buffer_count\": 9}"
# Partial offload: the first int(ratio · n) sub-groups offloaded, the rest stepped on the device.
# The gpt above has 4 sub-groups per rank at stage 3 (the "of 4" lines are checked in part 5),
# so 0.5 offloads 2 and 0.3 offloads int(1.2) = 1.
CPU_HALF='{"device": "cpu", "ratio": 0.5}'
CPU_NONE='{"device": "cpu", "ratio": 0.0}'
NVME_HALF="{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\", \"ratio\": 0.5}"
NVME_ONE="{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\", \"ratio\": 0.3, \"pipeline_read\": true, \"pipeline_write\": true, \"buffer_count\": 9}"

offload_json() {  # KIND → its offload_optimizer object
  case $1 in
    cpu) echo "$CPU" ;; nvme) echo "$NVME" ;; nvme_pipe) echo "$NVME_PIPE" ;;
    cpuhalf) echo "$CPU_HALF" ;; r0cpu) echo "$CPU_NONE" ;; nvmehalf) echo "$NVME_HALF" ;; nvmeone) echo "$NVME_ONE" ;;
  esac
}

# ---- 1. parity ----------------------------------------------------------------------------
CASES=("1 cpu" "2 cpu" "3 cpu" "3 nvme" "3 nvme_pipe" "3 cpuhalf" "3 nvmehalf" "3 r0cpu" "3 nvmeone")
[ "$SANITIZED" = 1 ] && CASES=("2 cpu" "3 nvme_pipe" "3 cpuhalf" "3 nvmeone")
for prec in fp32 bf16; do
  [ "$SANITIZED" = 1 ] && [ "$prec" = bf16 ] && continue
  for stage in 1 2 3; do
    config "$WORK/base$stage$prec.json" "$stage" "$prec" ""
    [ "$SANITIZED" = 1 ] && ! printf '%s\n' "${CASES[@]}" | grep -q "^$stage " && continue
    train 2 "$WORK/base$stage$prec.json" "$WORK/base$stage$prec.log" --steps $K --save_dir "$WORK/base$stage$prec" ||
      fail "stage $stage $prec without offload: $(tail -3 "$WORK/base$stage$prec.log")"
  done
  for c in "${CASES[@]}"; do
    read -r stage kind <<< "$c"
    name=$kind$stage$prec
    off=$(offload_json "$kind")
    config "$WORK/$name.json" "$stage" "$prec" "$off"
    train 2 "$WORK/$name.json" "$WORK/$name.log" --steps $K --save_dir "$WORK/$name" ||
      { fail "$name: $(tail -3 "$WORK/$name.log")"; continue; }
    out=$(same_ckpt "$WORK/base$stage$prec/global_step$K" "$WORK/$name/global_step$K") &&
      pass "$prec stage $stage offload $kind: checkpoint bit-identical to the run without offload" ||
      fail "$prec stage $stage offload $kind differs from the run without offload: $out"
  done
done
# The comparison can fail: one more step is not the same state.
train 2 "$WORK/base3fp32.json" "$WORK/ctl.log" --steps $((K + 1)) --save_dir "$WORK/ctl" || fail "control run"
same_ckpt "$WORK/base3fp32/global_step$K" "$WORK/ctl/global_step$((K + 1))" > /dev/null &&
  fail "control: step $K and step $((K + 1)) compare equal" || pass "control: step $K and step $((K + 1)) differ"

# ---- 2. device and host memory with offload cpu ------------------------------------------
dev_peak() {  # LOG CATEGORY → rank 0's measured device peak of CATEGORY (or total)
  sed -n "s/.*memory peak per rank (bytes): .*\\b$2=\\([0-9]*\\)[,;].*/\\1/p" "$1" | head -1
}
host_peak() {  # LOG CATEGORY → "measured planned" host bytes of rank 0
  sed -n "s/.*host memory peak per rank (bytes, measured\\/planned): .*\\b$2=\\([0-9]*\\)\\/\\([0-9]*\\)[,;].*/\\1 \\2/p" "$1" | head -1
}
for stage in 2 3; do
  [ -f "$WORK/cpu${stage}fp32.log" ] || continue
  base=$WORK/base${stage}fp32.log off=$WORK/cpu${stage}fp32.log
  bo=$(dev_peak "$base" optimizer_state) bt=$(dev_peak "$base" total)
  oo=$(dev_peak "$off" optimizer_state) ot=$(dev_peak "$off" total)
  read -r hm hp <<< "$(host_peak "$off" optimizer_state)"
  if [ -z "$bo" ] || [ -z "$oo" ] || [ -z "$hm" ]; then fail "stage $stage: no memory lines"; continue; fi
  [ "$oo" = 0 ] && [ $((bt - ot)) -ge "$bo" ] &&
    pass "stage $stage offload cpu: device optimizer state $bo B -> $oo B, device peak $bt B -> $ot B (drop $((bt - ot)) B >= $bo B)" ||
    fail "stage $stage offload cpu: device optimizer state $bo -> $oo B, peak $bt -> $ot B (expected 0 and a drop >= $bo)"
  [ "$hm" = "$hp" ] && [ "$hm" -gt "$bo" ] &&
    pass "stage $stage offload cpu: host optimizer state $hm B as planned (master always separate: > $bo B)" ||
    fail "stage $stage offload cpu: host optimizer state measured $hm B, planned $hp B, device run had $bo B"
done

# Every offloaded run: the host peaks equal the plan, category by category (the plan is
# derived from the layout before anything is allocated; the measurement is the host device's
# accounting plus the swap buffers).
checked=0
for log in "$WORK"/cpu*.log "$WORK"/nvme*.log; do
  [ -f "$log" ] || continue
  line=$(sed -n 's/.*host memory peak per rank (bytes, measured\/planned): \(.*\); NVMe.*/\1/p' "$log")
  bad=$(tr ',' '\n' <<< "$line" | tr -d ' ' | awk -F'[=/]' 'NF == 3 && $2 != $3')
  if [ -z "$line" ] || [ -n "$bad" ]; then fail "$(basename "$log"): host measured/planned differ: ${bad:-no host line}"; fi
  checked=$((checked + 1))
done
pass "host memory measured == planned in every category of $checked offloaded runs"

# ---- 3. NVMe: resume, reshard, bounded RSS ----------------------------------------------
H=$((K / 2))
name=nvme_pipe3fp32
if [ -d "$WORK/$name" ] && [ "$SANITIZED" = 0 ]; then
  # fp32 stage 3 nvme saved at step K only; resume from a step-H save of the same config.
  train 2 "$WORK/$name.json" "$WORK/half.log" --steps $H --save_dir "$WORK/half" || fail "nvme half run: $(tail -3 "$WORK/half.log")"
  train 2 "$WORK/$name.json" "$WORK/resumed.log" --steps $K --load_dir "$WORK/half" --save_dir "$WORK/resumed" ||
    fail "nvme resume: $(tail -3 "$WORK/resumed.log")"
  out=$(same_ckpt "$WORK/$name/global_step$K" "$WORK/resumed/global_step$K") &&
    pass "nvme: $H steps + save + load + $H steps == $K steps, bit for bit" || fail "nvme resume differs: $out"
  # Reshard: the 2-rank checkpoint continued on 1 rank (same global batch: micro 4).
  sed 's/"train_micro_batch_size_per_gpu": 2/"train_micro_batch_size_per_gpu": 4/' "$WORK/$name.json" > "$WORK/one.json"
  train 1 "$WORK/one.json" "$WORK/one.log" --steps $K --load_dir "$WORK/half" --save_dir "$WORK/one" ||
    fail "nvme reshard 2 -> 1 rank: $(tail -3 "$WORK/one.log")"
  "$DSCPP" zero-to-fp32 "$WORK/one" "$WORK/one.st" -q > /dev/null 2>&1 && "$DSCPP" zero-to-fp32 "$WORK/$name" "$WORK/two.st" -q > /dev/null 2>&1 ||
    fail "zero-to-fp32 of the nvme checkpoints"
  # Tolerance as in zero_train.sh: the same sums in another order (one rank instead of two),
  # ~1e-7 relative per gradient, which Adam passes on at lr scale; 1e-6 leaves headroom and
  # is far below what one extra step changes (the control above).
  out=$("$COMPARE" "$WORK/two.st" "$WORK/one.st" --atol 1e-6 --skip c_attn.bias 2>&1) &&
    pass "nvme: 2-rank checkpoint resumed on 1 rank matches the 2-rank run: $out" || fail "nvme reshard differs: $out"
fi

# Peak RSS: one rank, bigger model, the same run with the optimizer on the host vs on NVMe.
BIG=(--layers 12 --d_model 160 --heads 4 --context 16 --sample_chars 0)
rss_run() {  # CONFIG LOG → prints VmHWM in KiB
  /usr/bin/time -f "maxrss_kib=%M" "$RUNTIME" --model "$GPT" --deepspeed_config "$1" --steps 2 --no_eval -- "${BIG[@]}" > "$2" 2>&1
  sed -n 's/^maxrss_kib=\([0-9]*\)/\1/p' "$2"
}
if [ "$SANITIZED" = 0 ]; then
  config "$WORK/rss_cpu.json" 3 fp32 "$CPU"
  config "$WORK/rss_nvme.json" 3 fp32 "$NVME"
  sed -i 's/"sub_group_size": 3000/"sub_group_size": 100000/' "$WORK/rss_cpu.json" "$WORK/rss_nvme.json"
  rc=$(rss_run "$WORK/rss_cpu.json" "$WORK/rss_cpu.log") rn=$(rss_run "$WORK/rss_nvme.json" "$WORK/rss_nvme.log")
  read -r _ state <<< "$(host_peak "$WORK/rss_cpu.log" optimizer_state)"
  read -r _ pool <<< "$(host_peak "$WORK/rss_nvme.log" optimizer_state)"
  ondisk=$(sed -n 's/.*NVMe planned=\([0-9]*\).*/\1/p' "$WORK/rss_nvme.log")
  if [ -z "$rc" ] || [ -z "$rn" ] || [ -z "$state" ] || [ -z "$pool" ] || [ -z "$ondisk" ]; then
    fail "RSS runs: $(tail -2 "$WORK/rss_cpu.log") / $(tail -2 "$WORK/rss_nvme.log")"
  else
    saved=$(((rc - rn) * 1024))
    msg="VmHWM cpu offload $((rc / 1024)) MiB, nvme $((rn / 1024)) MiB; optimizer state $((state >> 20)) MiB on the host vs $((pool >> 20)) MiB of swap buffers ($((ondisk >> 20)) MiB on NVMe)"
    [ "$ondisk" -ge $((4 * pool)) ] && [ "$saved" -ge $(((state - pool) / 3)) ] && pass "nvme RSS bounded: $msg" ||
      fail "nvme RSS not bounded as expected (need state on NVMe >= 4x buffers, RSS saving >= a third of the difference): $msg"
    grep -q "optimizer swap (rank 0): read .*io_wait=" "$WORK/rss_nvme.log" && pass "nvme: swap I/O and io_wait logged" ||
      fail "nvme: no swap line in the log"
  fi
fi

# ---- 4. errors ----------------------------------------------------------------------------
expect_error() {  # WHAT LOG PATTERN...
  local what=$1 log=$2 p
  shift 2
  for p in "$@"; do grep -q -- "$p" "$log" || { fail "$what: no '$p' in: $(grep -i error "$log" | head -3)"; return; }; done
  pass "$what: $(grep -m1 -iE "error|fail" "$log" | cut -c1-240)"
}
run1() {  # CONFIG LOG [args] : one rank, no launcher
  local cfg=$1 log=$2
  shift 2
  "$RUNTIME" --model "$GPT" --deepspeed_config "$cfg" --no_eval "$@" -- "${GPT_ARGS[@]}" > "$log" 2>&1
}
config "$WORK/missing.json" 3 fp32 "{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nope\"}"
run1 "$WORK/missing.json" "$WORK/missing.log" --steps 1 && fail "missing nvme_path: the run succeeded" ||
  expect_error "missing nvme_path" "$WORK/missing.log" "offload_optimizer" "$WORK/nope does not exist" "mkdir -p"
config "$WORK/s0.json" 0 fp32 "$CPU"
run1 "$WORK/s0.json" "$WORK/s0.log" --steps 1 && fail "offload at stage 0 ran" ||
  expect_error "offload at stage 0" "$WORK/s0.log" "offload_optimizer" "stage 1, 2 or 3"
config "$WORK/s2n.json" 2 fp32 "$NVME"
run1 "$WORK/s2n.json" "$WORK/s2n.log" --steps 1 && fail "nvme at stage 2 ran" ||
  expect_error "nvme at stage 2" "$WORK/s2n.log" "offload_optimizer.device" "needs ZeRO stage 3"
config "$WORK/ratio2.json" 2 fp32 "$CPU_HALF"
run1 "$WORK/ratio2.json" "$WORK/ratio2.log" --steps 1 && fail "ratio 0.5 at stage 2 ran" ||
  expect_error "ratio < 1 at stage 2" "$WORK/ratio2.log" "offload_optimizer.ratio" "needs ZeRO stage 3" "found stage 2"
for r in 1.5 -0.1; do
  config "$WORK/ratio_range.json" 3 fp32 "{\"device\": \"cpu\", \"ratio\": $r}"
  run1 "$WORK/ratio_range.json" "$WORK/ratio_range.log" --steps 1 && fail "ratio $r ran" ||
    expect_error "ratio $r" "$WORK/ratio_range.log" "offload_optimizer.ratio" "expected a number from 0 to 1"
done
config "$WORK/few.json" 3 fp32 "{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme\", \"pipeline_read\": true}"
run1 "$WORK/few.json" "$WORK/few.log" --steps 1 && fail "pipeline_read with 4 buffers ran" ||
  expect_error "buffer_count too small" "$WORK/few.log" "buffer_count is 4" "at least 6"

# Unwritable and full disks: a read-only bind mount and a 1 MiB tmpfs, each in a private mount
# namespace (root ignores permission bits; nothing leaks to the host).
if [ "$(id -u)" = 0 ] && unshare -m true 2> /dev/null; then
  mkdir -p "$WORK/ro" "$WORK/small"
  config "$WORK/ro.json" 3 fp32 "{\"device\": \"nvme\", \"nvme_path\": \"$WORK/ro\"}"
  unshare -m sh -c "mount --bind '$WORK/ro' '$WORK/ro' && mount -o remount,ro,bind '$WORK/ro' && exec \"\$0\" \"\$@\"" \
    "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/ro.json" --steps 1 --no_eval -- "${GPT_ARGS[@]}" > "$WORK/ro.log" 2>&1 &&
    fail "read-only nvme_path: the run succeeded" ||
    expect_error "unwritable nvme_path" "$WORK/ro.log" "offload_optimizer" "$WORK/ro is not writable"
  config "$WORK/full.json" 3 fp32 "{\"device\": \"nvme\", \"nvme_path\": \"$WORK/small\"}"
  unshare -m sh -c "mount -t tmpfs -o size=1m tmpfs '$WORK/small' && exec \"\$0\" \"\$@\"" \
    "$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/full.json" --steps 1 --no_eval -- "${BIG[@]}" > "$WORK/full.log" 2>&1 &&
    fail "full disk: the run succeeded" ||
    expect_error "disk full" "$WORK/full.log" "optimizer.swp" "No space left on device" "larger disk"
else
  echo "skipped: unwritable and full nvme_path (need root and mount namespaces)"
fi

# pin_memory under a 64 KiB memlock limit (without CAP_IPC_LOCK, which root has): a warning
# naming the limit, unpinned buffers, and the same training. Not under ASan, whose mlock
# interceptor does nothing and reports success.
if [ "$SANITIZED" = 0 ] && [ "$(id -u)" = 0 ] && command -v prlimit > /dev/null && command -v setpriv > /dev/null; then
  config "$WORK/pin.json" 3 fp32 "$NVME"
  prlimit --memlock=65536:65536 setpriv --bounding-set -ipc_lock "$RUNTIME" --model "$GPT" --deepspeed_config \
    "$WORK/pin.json" --steps 2 --no_eval -- "${GPT_ARGS[@]}" > "$WORK/pin.log" 2>&1 &&
    grep -q "pin_memory: cannot lock (pin) .* the memlock limit is 64.00 KiB.*stay unpinned" "$WORK/pin.log" &&
    pass "pin_memory beyond the memlock limit: warned, trained unpinned" ||
    fail "pin_memory beyond the memlock limit: $(grep -iE "warn|error" "$WORK/pin.log" | head -2)"
fi

# The swap file removed while training: the run stops naming it; the last checkpoint loads.
mkdir -p "$WORK/nvme_rm"
config "$WORK/rm.json" 3 fp32 "{\"device\": \"nvme\", \"nvme_path\": \"$WORK/nvme_rm\"}"
run1 "$WORK/rm.json" "$WORK/rm.log" --steps 100000 --save_dir "$WORK/rm_ckpt" --save_interval 2 &
pid=$!
for _ in $(seq 2400); do [ -f "$WORK/rm_ckpt/latest" ] && break; sleep 0.05; done  # ≤ 2 min
rm -f "$WORK"/nvme_rm/dscpp-*-rank0/optimizer.swp
wait $pid && fail "swap file removed: the run succeeded" ||
  expect_error "swap file removed" "$WORK/rm.log" "optimizer.swp was removed while the job was using it"
tag=$(cat "$WORK/rm_ckpt/latest" 2> /dev/null)
step=${tag#global_step}
run1 "$WORK/rm.json" "$WORK/rm_resume.log" --steps $((step + 1)) --load_dir "$WORK/rm_ckpt" &&
  grep -q "resumed from .*$tag" "$WORK/rm_resume.log" && pass "after the removal, the last checkpoint ($tag) loads and trains" ||
  fail "the last checkpoint ($tag) after the removal: $(tail -3 "$WORK/rm_resume.log")"

# ---- 5. partial offload: the device keeps the rest; checkpoints cross ratios ---------------
optim_split() {  # LOG → "device_measured device_planned host_measured host_planned offloaded of" (rank 0)
  sed -n 's/.*optimizer state per rank (bytes, measured\/planned): device=\([0-9]*\)\/\([0-9]*\), host=\([0-9]*\)\/\([0-9]*\), .*; \([0-9]*\) of \([0-9]*\) sub-groups offloaded.*/\1 \2 \3 \4 \5 \6/p' "$1" | head -1
}
for prec in fp32 bf16; do
  [ -f "$WORK/cpuhalf3$prec.log" ] || continue
  read -r dh ph hh hph kh nh <<< "$(optim_split "$WORK/cpuhalf3$prec.log")"
  if [ -z "$dh" ]; then fail "$prec partial offload: no optimizer-state line"; continue; fi
  [ "$kh" = 2 ] && [ "$nh" = 4 ] && grep -q "offload_optimizer ratio 0.5: 2 of 4 sub-groups offloaded to cpu" "$WORK/cpuhalf3$prec.log" &&
    pass "$prec ratio 0.5: 2 of 4 sub-groups offloaded (logged at start)" || fail "$prec ratio 0.5: $kh of $nh sub-groups offloaded, expected 2 of 4"
  [ "$dh" = "$ph" ] && [ "$hh" = "$hph" ] && pass "$prec ratio 0.5: optimizer state device $dh B, host $hh B, both as planned" ||
    fail "$prec ratio 0.5: optimizer state device $dh/$ph B, host $hh/$hph B (measured/planned)"
  if [ -f "$WORK/r0cpu3$prec.log" ] && [ -f "$WORK/cpu3$prec.log" ]; then
    read -r d0 p0 _ _ k0 _ <<< "$(optim_split "$WORK/r0cpu3$prec.log")"
    read -r d1 _ h1 _ k1 n1 <<< "$(optim_split "$WORK/cpu3$prec.log")"
    # Offloaded or not, a sub-group's state costs the same 12 bytes per element (Adam's m and v
    # and the fp32 master): the two shares add up to the whole.
    [ "$d0" = "$p0" ] && [ "$k0" = 0 ] && [ "$k1" = "$n1" ] && [ "$d1" = 0 ] && [ "$dh" -gt 0 ] && [ "$dh" -lt "$d0" ] &&
      [ $((dh + hh)) = "$d0" ] && [ "$h1" = "$d0" ] &&
      pass "$prec device optimizer state: ratio 0 $d0 B > ratio 0.5 $dh B (+ host $hh B = $d0) > ratio 1 $d1 B" ||
      fail "$prec device optimizer state: ratio 0 $d0/$p0 B ($k0 offloaded), 0.5 $dh B + host $hh B, ratio 1 $d1 B + host $h1 B ($k1 of $n1)"
  fi
  if [ -f "$WORK/nvmeone3$prec.log" ]; then
    read -r d2 p2 _ _ k2 n2 <<< "$(optim_split "$WORK/nvmeone3$prec.log")"
    [ "$k2" = 1 ] && [ "$n2" = 4 ] && [ "$d2" = "$p2" ] && [ "$d2" -gt "$dh" ] &&
      pass "$prec nvme ratio 0.3: 1 of 4 sub-groups swapped, device optimizer state $d2 B as planned (> $dh B at 0.5)" ||
      fail "$prec nvme ratio 0.3: $k2 of $n2 swapped, device optimizer state $d2/$p2 B"
  fi
done

# Resume across ratios: saved with 0.5 and loaded with 1 (cpu), saved with 1 and loaded with 0.5
# (nvme); the checkpoint format is the same, so both continue bit for bit as the unbroken run.
if [ -d "$WORK/base3fp32" ]; then
  for pair in "cpuhalf cpu" "nvme nvmehalf"; do
    read -r from to <<< "$pair"
    config "$WORK/x_$from.json" 3 fp32 "$(offload_json "$from")"
    config "$WORK/x_$to.json" 3 fp32 "$(offload_json "$to")"
    train 2 "$WORK/x_$from.json" "$WORK/x_$from.log" --steps $H --save_dir "$WORK/x_$from" ||
      { fail "$from $H steps: $(tail -3 "$WORK/x_$from.log")"; continue; }
    train 2 "$WORK/x_$to.json" "$WORK/x_$to.log" --steps $K --load_dir "$WORK/x_$from" --save_dir "$WORK/x_${from}_$to" ||
      { fail "$from -> $to resume: $(tail -3 "$WORK/x_$to.log")"; continue; }
    out=$(same_ckpt "$WORK/base3fp32/global_step$K" "$WORK/x_${from}_$to/global_step$K") &&
      pass "saved with $from, resumed with $to: $H + $H steps == $K steps without offload, bit for bit" ||
      fail "saved with $from, resumed with $to differs: $out"
  done
fi

exit $FAILED
