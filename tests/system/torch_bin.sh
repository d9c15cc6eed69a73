#!/usr/bin/env bash
# Hugging Face directories that hold torch.save weights (pytorch_model.bin, sharded with
# pytorch_model.bin.index.json) load in the model families as their safetensors saves do
# (checkpoint/torch_file.h, docs/checkpoints.md), made by transformers 4.44.2 itself (the venv
# scripts/setup.sh makes; skipped, 77, without it):
#   1. tiny GPT-2 (Conv1D weights stored [in, out], lm_head tied to wte: two names of one
#      storage) and tied Llama 3, saved by save_pretrained with safe_serialization False and
#      True, in float32 and bfloat16: --from_hf of the .bin directory gives the loss of the
#      safetensors directory, digit for digit (both hold the same values), and in float32 the
#      loss of the committed reference directory;
#   2. the same from torch.save's legacy format, from a sharded save (max_shard_size 20KB,
#      seven shards of llama_gqa) and through --init_from of the .bin file;
#   3. a pytorch_model.bin whose pickle calls os.system is refused by name, and nothing runs.
# Usage: torch_bin.sh RUNTIME LLAMA_SO GPT2_SO SOURCE_ROOT
set -u
RUNTIME=$1 LLAMA=$2 GPT2=$3 SRC=$4
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
DATA=$SRC/tests/data/hf
if ! "$VENV/bin/python" -c "import transformers, safetensors" 2> /dev/null; then
  echo "torch_bin: no transformers venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
WORK=$(mktemp -d /tmp/dscpp_torch_bin.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
plugin_of() { [ "$1" = gpt2 ] && echo "$GPT2" || echo "$LLAMA"; }
cat > "$WORK/eval.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0, "zero_optimization": {"stage": 0},
 "optimizer": {"type": "SGD", "params": {"lr": 1.0}}}
JSON
# eval_loss MODEL LOG plugin-args...: the loss --eval_only prints on the reference batch
eval_loss() {
  local m=$1 log=$2
  shift 2
  "$RUNTIME" --model "$(plugin_of "$m")" --deepspeed_config "$WORK/eval.json" --eval_only -- "$@" \
    --data "$DATA/$m/tokens.bin" --eval_data "$DATA/$m/tokens.bin" --context 16 > "$log" 2>&1
  sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$log"
}

if ! "$VENV/bin/python" - "$DATA" "$WORK" > "$WORK/py.log" 2>&1 <<'PY'
import os, shutil, sys, torch
from transformers import AutoModelForCausalLM
data, work = sys.argv[1], sys.argv[2]
for m in ("gpt2", "llama3_tied"):
    for dtype in ("float32", "bfloat16"):
        model = AutoModelForCausalLM.from_pretrained(f"{data}/{m}", torch_dtype=getattr(torch, dtype))
        model.save_pretrained(f"{work}/{m}.{dtype}.bin", safe_serialization=False)
        model.save_pretrained(f"{work}/{m}.{dtype}.st", safe_serialization=True)
        assert os.listdir(f"{work}/{m}.{dtype}.bin").count("pytorch_model.bin") == 1
    os.makedirs(f"{work}/{m}.legacy")
    shutil.copy(f"{data}/{m}/config.json", f"{work}/{m}.legacy/")
    sd = torch.load(f"{work}/{m}.float32.bin/pytorch_model.bin")
    torch.save(sd, f"{work}/{m}.legacy/pytorch_model.bin", _use_new_zipfile_serialization=False)
model = AutoModelForCausalLM.from_pretrained(f"{data}/llama_gqa", torch_dtype=torch.float32)
model.save_pretrained(f"{work}/llama_gqa.sharded", safe_serialization=False, max_shard_size="20KB")
assert os.path.exists(f"{work}/llama_gqa.sharded/pytorch_model.bin.index.json")
PY
then
  fail "saving the models with transformers"; tail -20 "$WORK/py.log"; exit 1
fi

# 1. .bin against safetensors, float32 and bfloat16; float32 against the reference directory
for m in gpt2 llama3_tied; do
  ref=$(eval_loss $m "$WORK/$m.ref.log" --from_hf "$DATA/$m")
  for dtype in float32 bfloat16; do
    st=$(eval_loss $m "$WORK/$m.$dtype.st.log" --from_hf "$WORK/$m.$dtype.st")
    bin=$(eval_loss $m "$WORK/$m.$dtype.bin.log" --from_hf "$WORK/$m.$dtype.bin")
    if [ -n "$bin" ] && [ "$bin" = "$st" ]; then pass "$m $dtype: pytorch_model.bin loss $bin = model.safetensors $st"
    else fail "$m $dtype: pytorch_model.bin loss '$bin', model.safetensors '$st'"; tail -5 "$WORK/$m.$dtype.bin.log"; fi
  done
  if [ -n "$ref" ] && [ "$(eval_loss $m "$WORK/$m.f32.log" --from_hf "$WORK/$m.float32.bin")" = "$ref" ]; then
    pass "$m float32: the reference directory's loss $ref"
  else fail "$m float32: not the reference directory's loss '$ref'"; fi
  # 2. the legacy format; --init_from of the file with the shape from --config
  legacy=$(eval_loss $m "$WORK/$m.legacy.log" --from_hf "$WORK/$m.legacy")
  if [ -n "$ref" ] && [ "$legacy" = "$ref" ]; then pass "$m: torch.save's legacy format, loss $legacy"
  else fail "$m: legacy format loss '$legacy', want '$ref'"; tail -5 "$WORK/$m.legacy.log"; fi
  init=$("$RUNTIME" --model "$(plugin_of $m)" --deepspeed_config "$WORK/eval.json" --eval_only \
    --init_from "$WORK/$m.float32.bin/pytorch_model.bin" -- --config "$DATA/$m/config.json" \
    --data "$DATA/$m/tokens.bin" --eval_data "$DATA/$m/tokens.bin" --context 16 2>&1 |
    sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p')
  if [ -n "$ref" ] && [ "$init" = "$ref" ]; then pass "$m: --init_from pytorch_model.bin, loss $init"
  else fail "$m: --init_from pytorch_model.bin loss '$init', want '$ref'"; fi
done
ref=$(eval_loss llama_gqa "$WORK/gqa.ref.log" --from_hf "$DATA/llama_gqa")
got=$(eval_loss llama_gqa "$WORK/gqa.sharded.log" --from_hf "$WORK/llama_gqa.sharded")
shards=$(ls "$WORK/llama_gqa.sharded" | grep -c '^pytorch_model-.*\.bin$')
if [ -n "$ref" ] && [ "$got" = "$ref" ]; then pass "llama_gqa: $shards shards by pytorch_model.bin.index.json, loss $got"
else fail "llama_gqa sharded: loss '$got', want '$ref'"; tail -5 "$WORK/gqa.sharded.log"; fi

# 3. a malicious pytorch_model.bin
mkdir "$WORK/evil"
cp "$DATA/gpt2/config.json" "$WORK/evil/"
cp "$SRC/tests/data/torch_bin/evil/os_system.bin" "$WORK/evil/pytorch_model.bin"
if out=$(eval_loss gpt2 "$WORK/evil.log" --from_hf "$WORK/evil") && [ -n "$out" ]; then fail "os.system pickle accepted"
elif grep -q "global 'os.system'" "$WORK/evil.log" && ! grep -q pwned "$WORK/evil.log"; then
  pass "os.system pickle refused: $(grep -o "names the global 'os.system'.\{0,40\}" "$WORK/evil.log" | head -1)..."
else fail "os.system pickle: not refused by name"; tail -5 "$WORK/evil.log"; fi

[ $FAILED = 0 ] && echo "torch_bin: all passed"
exit $FAILED
