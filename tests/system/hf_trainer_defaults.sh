#!/usr/bin/env bash
# Without an optimizer or scheduler block dscpp trains as the HF Trainer does; the oracle is
# transformers' own Trainer (create_optimizer_and_scheduler) run here, in the venv
# scripts/setup.sh makes (skipped, 77, without it):
#   1. the parameters each family exempts from weight decay (dscpp-runtime --describe_model's
#      roles) are the ones Trainer.get_decay_parameter_names leaves out, with the family's norm
#      class counted as a norm (transformers 4.44.2 registers only LlamaRMSNorm and nn.LayerNorm,
#      so its list decays Mistral's and Qwen2's norm weights; later releases match norms by name
#      too, as the Trainer's documentation promises: "all layers except all bias and LayerNorm
#      weights");
#   2. 4 steps of each family on 2 ranks (ZeRO 0-3, so exempt ranges fall inside rank slices) with
#      --learning_rate/--weight_decay/--warmup_steps end where the Trainer's 4 steps end (its
#      AdamW, its two parameter groups, its linear schedule): the loss within 1e-5, the norm
#      weights within 2e-6, where the one-group run (every parameter decayed) is far off;
#   3. the LR of every step equals get_scheduler's for each lr_scheduler_type dscpp runs.
# Usage: hf_trainer_defaults.sh DSCPP RUNTIME LLAMA_SO GPT2_SO MLP_SO SOURCE_ROOT
set -u
DSCPP=$1 RUNTIME=$2 LLAMA=$3 GPT2=$4 MLP=$5 SRC=$6
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
DATA=$SRC/tests/data/hf
if ! "$VENV/bin/python" -c "import transformers, safetensors, accelerate" 2> /dev/null; then
  echo "hf_trainer_defaults: no transformers + accelerate venv at $VENV (scripts/setup.sh test makes it): skipping"
  exit 77
fi
WORK=$(mktemp -d /tmp/dscpp_hf_trainer.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
FAILED=0
cat > "$WORK/oracle.py" <<'PY'
import copy, json, os, sys, tempfile
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, get_scheduler
from transformers.pytorch_utils import ALL_LAYERNORM_LAYERS

def trainer_for(model, **kw):
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=True, **kw)
    return Trainer(model=model, args=args)

def norm_classes(model):
    return {type(m) for m in model.modules() if "norm" in type(m).__name__.lower()}

what = sys.argv[1]
if what == "groups":  # MODEL_DIR DESCRIBE_JSON
    model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32)
    names = [n for n, _ in model.named_parameters()]
    as_released = set(names) - set(Trainer.get_decay_parameter_names(None, model))
    for cls in norm_classes(model) - set(ALL_LAYERNORM_LAYERS):
        ALL_LAYERNORM_LAYERS.append(cls)
    documented = set(names) - set(Trainer.get_decay_parameter_names(None, model))
    ours = {p["name"] for p in json.load(open(sys.argv[3]))["parameters"] if p["role"] in ("bias", "norm")}
    extra = sorted(documented - as_released)
    print(f"4.44.2 exempts {len(as_released)}; with the norm classes {len(documented)}"
          + (f" (4.44.2 decays {len(extra)} norm weights, e.g. {extra[0]})" if extra else ""))
    if ours != documented:
        print(f"dscpp only: {sorted(ours - documented)}; Trainer only: {sorted(documented - ours)}")
        sys.exit(1)
    sys.exit(0)

if what == "train":  # MODEL_DIR EXPORT_DIR STEPS LR WD WARMUP
    d, export, steps, lr, wd, warmup = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    ref = load_file(os.path.join(d, "reference.safetensors"))
    ids, labels = ref["input_ids"].long(), ref["labels"].long()
    base = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    for cls in norm_classes(base) - set(ALL_LAYERNORM_LAYERS):
        ALL_LAYERNORM_LAYERS.append(cls)
    ours = load_file(os.path.join(export, "model.safetensors"))
    def loss_of(model):
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits
            return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)))
    exported = copy.deepcopy(base)
    loaded = exported.load_state_dict({k: v.float() for k, v in ours.items()}, strict=False)
    tied = {"lm_head.weight"} if base.config.tie_word_embeddings else set()
    assert not loaded.unexpected_keys and set(loaded.missing_keys) <= tied, loaded
    our_loss = loss_of(exported)
    def run(grouped):
        model = copy.deepcopy(base)
        t = trainer_for(model, learning_rate=lr, weight_decay=wd, warmup_steps=warmup, max_steps=steps)
        t.create_optimizer_and_scheduler(num_training_steps=steps)
        opt, sched = t.optimizer, t.lr_scheduler
        if not grouped:  # one group, every parameter decayed: DeepSpeed's single group
            for g in opt.param_groups: g["weight_decay"] = wd
        for _ in range(steps):
            logits = model(input_ids=ids, use_cache=False).logits
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)).backward()
            opt.step(); sched.step(); opt.zero_grad(set_to_none=True)
        sd = model.state_dict()
        # Norm weights: where the groups differ, with gradients no rounding dominates (Adam
        # turns a gradient that is rounding noise, e.g. GPT-2's key bias, whose exact gradient
        # is 0, into a full-size step of either sign, so such elements cannot be compared).
        norms = [k for k in ours if k in sd and ("norm" in k or ".ln_" in k)]
        return abs(loss_of(model) - our_loss), max(float((ours[k].float() - sd[k]).abs().max()) for k in norms)
    (gl, gn), (sl, sn) = run(True), run(False)
    print(f"{gl:.3g} {gn:.3g} {sl:.3g} {sn:.3g}")
    sys.exit(0)

if what == "schedule":  # TYPE STEPS WARMUP LR: the LR each of STEPS optimizer steps uses
    kind, steps, warmup, lr = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = get_scheduler(kind, opt, num_warmup_steps=warmup, num_training_steps=steps)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"]); opt.step(); sched.step()
    print(" ".join(f"{x:.3e}" for x in lrs))
PY

# 1. Which parameters each family exempts.
for m in llama_gqa llama3_tied gpt2 qwen2 mistral_swa; do
  so=$LLAMA && [ "$m" = gpt2 ] && so=$GPT2
  "$RUNTIME" --model "$so" --describe_model -- --from_hf "$DATA/$m" --data "$DATA/$m/tokens.bin" --context 16 \
    > "$WORK/$m.describe.json" 2> /dev/null
  if out=$("$VENV/bin/python" "$WORK/oracle.py" groups "$DATA/$m" "$WORK/$m.describe.json" 2>&1); then
    echo "ok: $m: the biases and norms dscpp exempts from weight decay are the Trainer's: ${out##*$'\n'}"
  else echo "FAIL: $m: weight-decay groups differ from the Trainer's: $out"; FAILED=1; fi
done

# 2. Training with the Trainer's defaults, against the Trainer.
echo '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0, "zero_optimization": {"stage": STAGE}}' \
  > "$WORK/template.json"
stage=0
for m in gpt2 llama_gqa mistral_swa qwen2 llama3_tied; do
  so=$LLAMA && [ "$m" = gpt2 ] && so=$GPT2
  sed "s/STAGE/$stage/" "$WORK/template.json" > "$WORK/$m.json"
  if ! "$DSCPP" --num_procs 2 --master_port "$(port)" "$so" --deepspeed_config "$WORK/$m.json" --steps 4 --no_eval \
    --learning_rate 0.01 --weight_decay 0.1 --warmup_steps 1 --save_dir "$WORK/$m.ckpt" -- --from_hf "$DATA/$m" \
    --data "$DATA/$m/tokens.bin" --eval_data "$DATA/$m/tokens.bin" --context 16 > "$WORK/$m.log" 2>&1 ||
    ! "$DSCPP" export-hf -q "$WORK/$m.ckpt" "$WORK/$m.hf" > /dev/null; then
    echo "FAIL: $m: run or export"; tail -20 "$WORK/$m.log"; FAILED=1; stage=$(((stage + 1) % 4)); continue
  fi
  read -r loss norm loss1 norm1 < <("$VENV/bin/python" "$WORK/oracle.py" train "$DATA/$m" "$WORK/$m.hf" 4 0.01 0.1 1 \
    2> "$WORK/$m.oracle.err")
  if [ -z "${norm1:-}" ]; then echo "FAIL: $m: the Trainer's run failed: $(tail -3 "$WORK/$m.oracle.err")"; FAILED=1
  elif awk -v l="$loss" -v n="$norm" -v l1="$loss1" -v n1="$norm1" \
    'BEGIN { exit !(l <= 1e-5 && n <= 2e-6 && l1 > 3 * 1e-5 && n1 > 100 * 2e-6) }'; then
    echo "ok: $m at ZeRO $stage: 4 steps = the Trainer's (|loss difference| $loss, max norm-weight difference $norm;" \
      "one decayed group: $loss1, $norm1)"
  else
    echo "FAIL: $m at ZeRO $stage: |loss difference| $loss (tolerance 1e-5), norm weights $norm (2e-6); one decayed" \
      "group: $loss1, $norm1 (must exceed 3e-5 and 2e-4)"
    FAILED=1
  fi
  grep -q "weight decay: none on" "$WORK/$m.log" || { echo "FAIL: $m: no line saying which parameters skip weight decay"; FAILED=1; }
  stage=$(((stage + 1) % 4))
  unset loss norm loss1 norm1
done

# 3. Each schedule's LR, step by step (the mlp example: quick; one rank).
echo '{"train_batch_size": 8, "steps_per_print": 1}' > "$WORK/mlp.json"
for kind in linear cosine constant_with_warmup constant; do
  ours=$("$RUNTIME" --model "$MLP" --deepspeed_config "$WORK/mlp.json" --steps 9 --no_eval --learning_rate 0.002 \
    --warmup_steps 3 --lr_scheduler_type $kind 2>&1 | sed -n 's/.*step [0-9]*\/9 .*| lr \([^ ]*\) .*/\1/p' | tr '\n' ' ')
  theirs=$("$VENV/bin/python" "$WORK/oracle.py" schedule $kind 9 3 0.002 2> /dev/null)
  if [ "${ours% }" = "$theirs" ]; then echo "ok: $kind: every step's LR as transformers' get_scheduler: $theirs"
  else echo "FAIL: $kind: dscpp '${ours% }', transformers '$theirs'"; FAILED=1; fi
done
exit $FAILED
