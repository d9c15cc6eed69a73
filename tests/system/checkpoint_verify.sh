#!/usr/bin/env bash
# Checkpoints are verified against the SHA-256 digests their manifest recorded at save (the mlp
# example on a slice of Fashion-MNIST): one flipped byte in any file a load reads — stage 0's
# model.safetensors and optimizer.safetensors, a rank's partition file at stage 2, the
# manifest itself — is refused on resume and by `dscpp zero-to-fp32`, naming the file and the
# tensor; with the byte flipped back the same checkpoint loads, and its digests agree with
# Python's hashlib over the same byte ranges (an independent SHA-256). A resume on other data —
# fewer samples, or as many with other pixels — is refused unless --accept_data_change.
# Usage: checkpoint_verify.sh DSCPP RUNTIME MLP_SO
set -u
DSCPP=$1 RUNTIME=$2 MLP=$3
. "$(dirname "$0")/mlp_train.sh"  # skip without the data, WORK, fail/pass, port, train
MLP_ARGS=(-- --limit 512 --hidden 32)

config() {
  cat > "$2" <<JSON
{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 2, "zero_optimization": {"stage": $1},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}}
JSON
}
# flip FILE TENSOR: xors one byte in the middle of TENSOR's bytes (found through the file's header).
flip() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, name = sys.argv[1], sys.argv[2]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    begin, end = json.loads(f.read(n))[name]["data_offsets"]
    at = 8 + n + (begin + end) // 2
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x10]))
PY
}
# digests_agree TAG FILE: the manifest's digests of FILE equal hashlib's over the same ranges.
digests_agree() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import hashlib, json, struct, sys
tag, name = sys.argv[1], sys.argv[2]
recorded = json.load(open(f"{tag}/manifest.json"))["files"]["sha256"][name]
data = open(f"{tag}/{name}", "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
mine = {"__header__": hashlib.sha256(data[:8 + n]).hexdigest()}
for t, info in header.items():
    if t != "__metadata__":
        b, e = info["data_offsets"]
        mine[t] = hashlib.sha256(data[8 + n + b:8 + n + e]).hexdigest()
sys.exit(0 if mine == recorded else 1)
PY
}
config 0 "$WORK/s0.json"; config 2 "$WORK/s2.json"

# refused RANKS CONFIG SAVE FILE TENSOR NAME: the flipped checkpoint is refused on resume and by
# zero-to-fp32, naming FILE and TENSOR; flipped back, it loads.
refused() {
  local ranks=$1 cfg=$2 S=$3 file=$4 tensor=$5 name=$6 tag
  tag="$S/$(cat "$S/latest")"
  flip "$tag/$file" "$tensor"
  train "$ranks" "$cfg" "$WORK/$name-load.log" --steps 4 --load_dir "$S" &&
    fail "$name: a flipped byte in $file was loaded" ||
    { grep -q "is damaged: $tag/$file: tensor $tensor (.*) differs from what was saved" "$WORK/$name-load.log" &&
      pass "$name: resume refuses a flipped byte in $file, naming tensor $tensor" ||
      fail "$name: resume: $(grep -i "error" "$WORK/$name-load.log" | head -3)"; }
  "$DSCPP" zero-to-fp32 "$S" "$WORK/$name.safetensors" -q > "$WORK/$name-z2f.log" 2>&1 &&
    fail "$name: zero-to-fp32 read a flipped $file" ||
    { grep -q "is damaged: $tag/$file: tensor $tensor" "$WORK/$name-z2f.log" &&
      pass "$name: zero-to-fp32 refuses it too" || fail "$name: zero-to-fp32: $(cat "$WORK/$name-z2f.log")"; }
  flip "$tag/$file" "$tensor"  # back
}

# ---- stage 0: model.safetensors and optimizer.safetensors -----------------------------------
S0=$WORK/ckpt0
train 1 "$WORK/s0.json" "$WORK/s0.log" --steps 2 --save_dir "$S0" || fail "stage 0 save: $(tail -3 "$WORK/s0.log")"
digests_agree "$S0/global_step2" model.safetensors && digests_agree "$S0/global_step2" optimizer.safetensors &&
  pass "stage 0: the recorded digests agree with hashlib's" || fail "stage 0: digests differ from hashlib's"
refused 1 "$WORK/s0.json" "$S0" model.safetensors head.weight s0-model
refused 1 "$WORK/s0.json" "$S0" optimizer.safetensors fc1.bias/exp_avg_sq s0-optimizer
train 1 "$WORK/s0.json" "$WORK/s0-ok.log" --steps 3 --load_dir "$S0" &&
  grep -q "resumed from .*global_step2" "$WORK/s0-ok.log" && pass "stage 0: restored, the checkpoint loads" ||
  fail "stage 0: the restored checkpoint: $(tail -3 "$WORK/s0-ok.log")"

# ---- stage 2 on 2 ranks: rank 1's partition file --------------------------------------------
S2=$WORK/ckpt2
train 2 "$WORK/s2.json" "$WORK/s2.log" --steps 2 --save_dir "$S2" || fail "stage 2 save: $(tail -3 "$WORK/s2.log")"
digests_agree "$S2/global_step2" zero_pp_rank_1_partitions.safetensors &&
  pass "stage 2: rank 1's recorded digests agree with hashlib's" || fail "stage 2: digests differ from hashlib's"
refused 2 "$WORK/s2.json" "$S2" zero_pp_rank_1_partitions.safetensors exp_avg s2-rank1
train 2 "$WORK/s2.json" "$WORK/s2-ok.log" --steps 3 --load_dir "$S2" ||
  fail "stage 2: the restored checkpoint: $(tail -3 "$WORK/s2-ok.log")"

# ---- the manifest: a value edited after save ------------------------------------------------
M=$S2/global_step2/manifest.json
cp "$M" "$WORK/manifest.json"
sed -i 's/"global_steps": 2/"global_steps": 9/' "$M"
train 2 "$WORK/s2.json" "$WORK/manifest.log" --steps 12 --load_dir "$S2" &&
  fail "an edited manifest was loaded" ||
  { grep -q "manifest.json was changed after it was saved" "$WORK/manifest.log" &&
    pass "an edited manifest is refused" || fail "edited manifest: $(grep -i error "$WORK/manifest.log" | head -2)"; }
cp "$WORK/manifest.json" "$M"

# ---- other data ---------------------------------------------------------------------------
MLP_ARGS=(-- --limit 256 --hidden 32)
train 1 "$WORK/s0.json" "$WORK/data-fewer.log" --steps 3 --load_dir "$S0" &&
  fail "a resume on 256 samples instead of 512 was accepted" ||
  { grep -q "was trained on other data (train split 512 then, 256 now).*--accept_data_change" "$WORK/data-fewer.log" &&
    pass "a resume on fewer samples is refused, naming both sizes and the flag" ||
    fail "fewer samples: $(grep -i error "$WORK/data-fewer.log" | head -2)"; }
# The same files with one pixel of every training image changed: same sizes, other content.
mkdir "$WORK/other-data"
cp /usr/share/datasets/fashion-mnist/*.gz "$WORK/other-data/"
/usr/bin/python3 - "$WORK/other-data/train-images-idx3-ubyte.gz" <<'PY'
import gzip, sys
data = bytearray(gzip.open(sys.argv[1]).read())
for i in range(16 + 400, len(data), 784):  # pixel 400 of every image, after the 16-byte header
    data[i] ^= 0x01
gzip.open(sys.argv[1], "wb", compresslevel=1).write(bytes(data))
PY
MLP_ARGS=(-- --limit 512 --hidden 32 --data "$WORK/other-data")
train 1 "$WORK/s0.json" "$WORK/data-other.log" --steps 3 --load_dir "$S0" && fail "a resume on other pixels was accepted" ||
  { grep -q "the same sizes, but 64 samples spread over the train split differ" "$WORK/data-other.log" &&
    pass "a resume on the same number of other samples is refused" ||
    fail "other pixels: $(grep -i error "$WORK/data-other.log" | head -2)"; }
train 1 "$WORK/s0.json" "$WORK/data-accept.log" --steps 3 --load_dir "$S0" --accept_data_change && grep -q "resuming anyway (--accept_data_change)" "$WORK/data-accept.log" &&
  pass "--accept_data_change resumes on the other data with a warning" ||
  fail "--accept_data_change: $(tail -3 "$WORK/data-accept.log")"
exit $FAILED
