#!/usr/bin/env bash
# Files with Hugging Face names hold Hugging Face's layout and every name of a shared parameter
# (docs/checkpoints.md), checked with transformers 4.44.2 itself (the venv scripts/setup.sh makes;
# skipped, 77, without it):
#   1. tiny GPT-2 (Conv1D weights, lm_head tied to wte) and tied Llama 3, 3 AdamW steps at ZeRO 0
#      (1 rank) and ZeRO 3 (2 ranks, stage3_gather_16bit_weights_on_model_save): `dscpp
#      zero-to-fp32`'s output, stage 0's model.safetensors and the 16-bit model file each load
#      into GPT2LMHeadModel / LlamaForCausalLM with load_state_dict(strict=True) (the 16-bit model's
#      directory, model_16bit/, also with from_pretrained), hold both names
#      of the tied embedding with equal values, and give the loss dscpp's --eval_only gets from
#      the checkpoint on the reference batch (1e-5 relative: fp32 on both sides; dscpp prints 6
#      decimals of a loss near 4.6, ~2e-7 relative);
#   2. --init_from of the zero-to-fp32 output starts from that loss again (round trip);
#   3. refused, with the reason named: a file in dscpp's [out, in] order (as an older
#      zero-to-fp32 wrote it, and without its metadata), a partial file of an older dscpp holding
#      only the square attn.c_proj.weight (which shape cannot tell), and a file whose two names
#      of the shared embedding differ;
#   4. a tied Llama file that names the shared embedding only as lm_head.weight generates and
#      evaluates as the original does (`dscpp generate`, --eval_only).
# Usage: hf_layout.sh DSCPP RUNTIME LLAMA_SO GPT2_SO SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 LLAMA=$3 GPT2=$4 SRC=$5
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
DATA=$SRC/tests/data/hf
if ! "$VENV/bin/python" -c "import transformers, safetensors" 2> /dev/null; then
  echo "hf_layout: no transformers venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
export OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
WORK=$(mktemp -d /tmp/dscpp_hf_layout.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
plugin_of() { [ "$1" = gpt2 ] && echo "$GPT2" || echo "$LLAMA"; }
config() {  # config FILE STAGE MICRO
  cat > "$1" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": $3, "gradient_clipping": 0,
 "zero_optimization": {"stage": $2, "stage3_gather_16bit_weights_on_model_save": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}}}
JSON
}
data_args() { echo --data "$DATA/$1/tokens.bin" --eval_data "$DATA/$1/tokens.bin" --context 16; }
# eval_loss MODEL LOG runtime-args... -- plugin-args...: the loss --eval_only prints on the reference batch
eval_loss() {
  local m=$1 log=$2
  shift 2
  "$RUNTIME" --model "$(plugin_of "$m")" --deepspeed_config "$WORK/eval.json" --eval_only "$@" > "$log" 2>&1
  sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$log"
}
config "$WORK/eval.json" 0 4

for m in gpt2 llama3_tied; do
  config "$WORK/s0.json" 0 4
  config "$WORK/s3.json" 3 2
  # shellcheck disable=SC2046
  if ! "$RUNTIME" --model "$(plugin_of $m)" --deepspeed_config "$WORK/s0.json" --steps 3 --no_eval \
    --save_dir "$WORK/$m.s0" -- --from_hf "$DATA/$m" $(data_args $m) > "$WORK/$m.s0.log" 2>&1 ||
    ! "$DSCPP" --num_procs 2 --master_port "$(port)" "$(plugin_of $m)" --deepspeed_config "$WORK/s3.json" --steps 3 \
      --no_eval --save_dir "$WORK/$m.s3" -- --from_hf "$DATA/$m" $(data_args $m) > "$WORK/$m.s3.log" 2>&1 ||
    ! "$DSCPP" zero-to-fp32 "$WORK/$m.s0" "$WORK/$m.s0.fp32.safetensors" > /dev/null 2>&1 ||
    ! "$DSCPP" zero-to-fp32 "$WORK/$m.s3" "$WORK/$m.s3.fp32.safetensors" > /dev/null 2>&1; then
    fail "$m: training or zero-to-fp32"; tail -20 "$WORK/$m.s0.log" "$WORK/$m.s3.log"; continue
  fi
  for s in s0 s3; do
    # shellcheck disable=SC2046
    loss=$(eval_loss $m "$WORK/$m.$s.eval.log" --load_dir "$WORK/$m.$s" -- --config "$DATA/$m/config.json" $(data_args $m))
    # shellcheck disable=SC2046
    again=$(eval_loss $m "$WORK/$m.$s.init.log" --init_from "$WORK/$m.$s.fp32.safetensors" -- \
      --config "$DATA/$m/config.json" $(data_args $m))
    if [ -z "$loss" ]; then fail "$m $s: no eval loss"; tail -5 "$WORK/$m.$s.eval.log"; continue; fi
    if [ "$again" = "$loss" ]; then pass "$m $s: --init_from of the zero-to-fp32 output gives the checkpoint's loss $loss"
    else fail "$m $s: --init_from of the zero-to-fp32 output: loss '$again', the checkpoint's $loss"; tail -5 "$WORK/$m.$s.init.log"; fi
    files="$WORK/$m.$s.fp32.safetensors"
    [ $s = s0 ] && files="$files $WORK/$m.s0/global_step3/model.safetensors"
    [ $s = s3 ] && files="$files $WORK/$m.s3/global_step3/model_16bit/model.safetensors"
    # shellcheck disable=SC2086
    if out=$("$VENV/bin/python" - "$m" "$DATA" "$loss" $files 2> "$WORK/py.err" <<'PY'
import sys, torch
from safetensors.torch import load_file
from transformers import AutoConfig, GPT2LMHeadModel, LlamaForCausalLM
import torch.nn.functional as F
name, data, want, files = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
ref = load_file(f"{data}/{name}/reference.safetensors")
config = AutoConfig.from_pretrained(f"{data}/{name}", attn_implementation="eager")
cls = GPT2LMHeadModel if name == "gpt2" else LlamaForCausalLM
bad = 0
def check(model, what):  # the reference batch's loss against dscpp's
    global bad
    with torch.no_grad():
        logits = model(ref["input_ids"].long()).logits
    loss = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ref["labels"].long().reshape(-1)))
    ok = abs(loss - want) <= 1e-5 * want
    bad |= not ok
    print(f"{'' if ok else 'MISMATCH '}{what}, loss {loss:.7f} vs dscpp {want:.6f}")
for path in files:
    sd = load_file(path)
    emb = "transformer.wte.weight" if name == "gpt2" else "model.embed_tokens.weight"
    if "lm_head.weight" not in sd or emb not in sd or not torch.equal(sd["lm_head.weight"], sd[emb]):
        print(f"{path}: the tied embedding is not under both names with equal values"); bad = 1; continue
    model = cls(config).float().eval()
    try:
        model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    except RuntimeError as e:
        print(f"{path}: load_state_dict(strict=True): {e}"); bad = 1; continue
    check(model, f"{path.split('/')[-1]}: strict load")
    if path.endswith("model_16bit/model.safetensors"):  # the directory itself, as save_pretrained's
        check(cls.from_pretrained(path.rsplit("/", 1)[0], attn_implementation="eager").float().eval(),
              "model_16bit/: from_pretrained")
sys.exit(bad)
PY
    ); then pass "$m $s: transformers loads them: $(echo "$out" | tr '\n' ';')"
    else fail "$m $s: $out"; tail -5 "$WORK/py.err"; fi
  done
done

# 3. refusals. A file as an older zero-to-fp32 wrote it: dscpp's [out, in], its metadata saying
#    it came from dscpp but not in which order; the same without metadata; an older dscpp's
#    partial file holding only the square projections; two names of the shared embedding apart.
"$VENV/bin/python" - "$WORK/gpt2.s3.fp32.safetensors" "$WORK" "$WORK/llama3_tied.s3.fp32.safetensors" <<'PY' || fail "making the files to refuse"
import os, sys, torch
from safetensors.torch import load_file, save_file
src, work, llama = sys.argv[1], sys.argv[2], sys.argv[3]
sd = load_file(src)
conv = [k for k in sd if any(k.endswith(s) for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight"))]
old = {k: (v.t().contiguous() if k in conv else v) for k, v in sd.items()}
save_file(old, f"{work}/old.safetensors", metadata={"format": "pt", "dscpp_checkpoint": "x", "tensor": "fp32"})
save_file(old, f"{work}/bare.safetensors", metadata={"format": "pt"})
os.makedirs(f"{work}/square", exist_ok=True)
square = {k: v for k, v in old.items() if k.endswith("attn.c_proj.weight")}
save_file(square, f"{work}/square/model.safetensors", metadata={"format": "pt", "dscpp_checkpoint": "x"})
ll = load_file(llama)
ll["lm_head.weight"] = ll["lm_head.weight"] + 1
save_file(ll, f"{work}/untied.safetensors", metadata={"format": "pt"})
PY
cp "$DATA/gpt2/config.json" "$WORK/square/"
refused() {  # refused WHAT EXPECTED-TEXT LOG command...
  local what=$1 expect=$2 log=$3
  shift 3
  if "$@" > "$log" 2>&1; then fail "$what: accepted"
  elif grep -q "$expect" "$log"; then pass "$what: refused: $(grep -o "$expect.\{0,60\}" "$log" | head -1)..."
  else fail "$what: refused without saying '$expect'"; tail -5 "$log"; fi
}
G=(--model "$GPT2" --deepspeed_config "$WORK/eval.json" --eval_only)
# shellcheck disable=SC2046
refused "an older zero-to-fp32's file" "an older dscpp wrote this file" "$WORK/old.log" \
  "$RUNTIME" "${G[@]}" --init_from "$WORK/old.safetensors" -- --config "$DATA/gpt2/config.json" $(data_args gpt2)
# shellcheck disable=SC2046
refused "a file in dscpp's [out, in] order" "in dscpp's in-memory \[out, in\] order" "$WORK/bare.log" \
  "$RUNTIME" "${G[@]}" --init_from "$WORK/bare.safetensors" -- --config "$DATA/gpt2/config.json" $(data_args gpt2)
# shellcheck disable=SC2046
refused "an older dscpp's file of square attn.c_proj.weight only" "attn.c_proj.weight' (and every weight" \
  "$WORK/square.log" "$RUNTIME" "${G[@]}" -- --from_hf "$WORK/square" --init_partial $(data_args gpt2)
# shellcheck disable=SC2046
refused "a tied Llama whose two names differ" "holds different values under the two names" "$WORK/untied.log" \
  "$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/eval.json" --eval_only \
  --init_from "$WORK/untied.safetensors" -- --config "$DATA/llama3_tied/config.json" $(data_args llama3_tied)

mkdir -p "$WORK/lm_head_only" && cp "$DATA/llama3_tied/config.json" "$WORK/lm_head_only/"
"$VENV/bin/python" - "$DATA/llama3_tied/model.safetensors" "$WORK/lm_head_only/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1])
t["lm_head.weight"] = t.pop("model.embed_tokens.weight")
save_file(t, sys.argv[2], metadata={"format": "pt"})
PY
gen_ids() {  # gen_ids DIR: greedy ids from the weights in DIR
  "$DSCPP" generate "$LLAMA" --prompt_ids 5,17,3 --max_new_tokens 8 -- --from_hf "$1" \
    --data "$DATA/llama3_tied/tokens.bin" --context 16 2>&1 | sed -n 's/^ids: //p'
}
eval_loss() {  # eval_loss DIR
  "$RUNTIME" --model "$LLAMA" --deepspeed_config "$WORK/eval.json" --eval_only -- --from_hf "$1" \
    $(data_args llama3_tied) 2>&1 | grep -o 'loss [0-9.]*' | tail -1
}
want=$(gen_ids "$DATA/llama3_tied") got=$(gen_ids "$WORK/lm_head_only")
if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "tied Llama named by lm_head.weight only: generates $got, as the original"
else fail "tied Llama named by lm_head.weight only: generate gave '$got', the original '$want'"; fi
want=$(eval_loss "$DATA/llama3_tied") got=$(eval_loss "$WORK/lm_head_only")
if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "tied Llama named by lm_head.weight only: eval $got, as the original"
else fail "tied Llama named by lm_head.weight only: eval '$got', the original '$want'"; fi
exit $FAILED
