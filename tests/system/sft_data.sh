#!/usr/bin/env bash
# Supervised fine-tuning data (models/common/sft_data.h) on the tiny Llama of tests/data/hf,
# against transformers 4.44.2 (the venv scripts/setup.sh makes; skipped, 77, without it):
#   1. token ids with labels (-100: no loss): dscpp's --eval_only loss equals LlamaForCausalLM's
#      loss with those labels, over every example, token-weighted (1e-5 relative);
#   2. --packing: several examples a sample, the same loss (each example attends to itself alone,
#      positions from 0: its loss is counted once, as alone);
#   3. prompt/completion text, tokenized with a tokenizer trained here (BPE, <s> added): the loss
#      equals transformers' on tokenizer(prompt) + tokenizer(completion, add_special_tokens=False)
#      + </s>, with the prompt's labels at -100;
#   4. bad input refused naming file and line: labels longer than input_ids, a "messages" line, an
#      example longer than context+1 without --truncation (with it: cut, and counted);
#   5. 2 ranks at ZeRO-2 train on packed examples.
# Usage: sft_data.sh DSCPP RUNTIME LLAMA_SO SOURCE_ROOT
set -u
DSCPP=$(realpath "$1") RUNTIME=$(realpath "$2") LLAMA=$(realpath "$3") SRC=$(realpath "$4")
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
if ! "$VENV/bin/python" -c "import transformers, tokenizers" 2> /dev/null; then
  echo "sft_data: no transformers venv at $VENV: skipping"
  exit 77
fi
MODEL=$SRC/tests/data/hf/llama_gqa
WORK=$(mktemp -d /tmp/dscpp_sft.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
cd "$WORK" || exit 1
echo '{"train_micro_batch_size_per_gpu": 3, "steps_per_print": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}' \
  > eval.json
CONTEXT=24

# Token examples: 1-12 prompt tokens without loss, 2-12 completion tokens with it.
"$VENV/bin/python" - <<'PY'
import json, random
r = random.Random(7)
with open("ids.jsonl", "w") as f:
    for _ in range(23):
        p, c = r.randint(1, 12), r.randint(2, 12)
        ids = [r.randrange(3, 96) for _ in range(p + c)]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * p + ids[p:]}) + "\n")
PY
reference() {  # FILE: transformers' token-weighted loss over FILE's examples (input_ids/labels lines)
  "$VENV/bin/python" - "$MODEL" "$1" <<'PY'
import json, sys, torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM
model = LlamaForCausalLM.from_pretrained(sys.argv[1], attn_implementation="eager").float().eval()
total, count = 0.0, 0
with torch.no_grad():
    for line in open(sys.argv[2]):
        ex = json.loads(line)
        logits = model(torch.tensor([ex["input_ids"]])).logits[0, :-1]
        labels = torch.tensor(ex["labels"][1:])
        total += float(F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum"))
        count += int((labels != -100).sum())
print(f"{total / count:.7f}")
PY
}
eval_loss() {  # LOG plugin-args...
  local log=$1
  shift
  "$RUNTIME" --model "$LLAMA" --deepspeed_config eval.json --eval_only -- --from_hf "$MODEL" --context $CONTEXT "$@" \
    > "$log" 2>&1
  sed -n 's/.*eval only: loss \([0-9.]*\),.*/\1/p' "$log"
}
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * b) }'; }

# ---- 1, 2. token ids, unpacked and packed ----------------------------------------------------
want=$(reference ids.jsonl)
got=$(eval_loss a.log --sft_data ids.jsonl --sft_eval ids.jsonl)
close "$got" "$want" && pass "token ids: loss $got, transformers $want" ||
  fail "token ids: dscpp '$got' ($(grep -m1 -i -E 'error|fine-tuning' a.log)), transformers $want"
packed=$(eval_loss b.log --sft_data ids.jsonl --sft_eval ids.jsonl --packing)
samples=$(sed -n 's/.* \([0-9]*\) packed samples.*/\1/p' b.log | head -1)
close "$packed" "$want" && [ -n "$samples" ] && [ "$samples" -lt 23 ] &&
  pass "packed ($samples samples for 23 examples): loss $packed" ||
  fail "packed: '$packed' in '$samples' samples ($(grep -m1 -E 'error|fine-tuning' b.log)), transformers $want"

# ---- 3. prompt/completion text ---------------------------------------------------------------
"$VENV/bin/python" - <<'PY' || fail "making the tokenizer and the text examples"
import json, random
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
words = "the a cat dog sat ran on under mat log big small red blue quick slow answer question is what".split()
r = random.Random(3)
lines = [" ".join(r.choice(words) for _ in range(r.randint(2, 6))) for _ in range(200)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=90, special_tokens=["<unk>", "<s>", "</s>"]))
tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1), ("</s>", 2)])
import os
os.makedirs("tokenizer", exist_ok=True)
tok.save("tokenizer/tokenizer.json")
hf = PreTrainedTokenizerFast(tokenizer_file="tokenizer/tokenizer.json")
with open("text.jsonl", "w") as f, open("text_ids.jsonl", "w") as g:
    for i in range(12):
        prompt, completion = lines[2 * i] + " ?", lines[2 * i + 1]
        f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
        p = hf(prompt)["input_ids"]
        c = hf(completion, add_special_tokens=False)["input_ids"] + [2]
        g.write(json.dumps({"input_ids": p + c, "labels": [-100] * len(p) + c}) + "\n")
PY
want=$(reference text_ids.jsonl)
got=$(eval_loss c.log --sft_data text.jsonl --sft_eval text.jsonl --tokenizer tokenizer)
close "$got" "$want" && pass "prompt/completion text: loss $got, transformers $want" ||
  fail "text: dscpp '$got' ($(grep -m1 -E 'error|fine-tuning' c.log)), transformers $want"

# ---- 4. bad input ----------------------------------------------------------------------------
refuse() {  # NAME PATTERN LINE [plugin args...]
  local name=$1 pattern=$2 line=$3
  shift 3
  printf '%s\n%s\n' '{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}' "$line" > bad.jsonl
  if eval_loss bad.log --sft_data bad.jsonl "$@" > /dev/null && grep -q "eval only" bad.log; then
    fail "$name: accepted"
  elif grep -q -- "$pattern" bad.log; then
    pass "$name: $(grep -m1 -o -- "$pattern.*" bad.log | cut -c1-150)"
  else
    fail "$name: expected /$pattern/: $(grep -m1 -i error bad.log)"
  fi
}
refuse "labels longer than input_ids" "bad.jsonl:2: labels has 4 entries and input_ids 3" \
  '{"input_ids": [5, 6, 7], "labels": [5, 6, 7, 8]}'
refuse "a chat line" 'bad.jsonl:2: a "messages" (chat) example' '{"messages": [{"role": "user", "content": "hi"}]}'
refuse "an example too long" "has 30 tokens, more than context+1 = 25 (--truncation cuts" \
  "{\"input_ids\": [$(seq -s, 10 39)], \"labels\": [$(seq -s, 10 39)]}" --sft_eval bad.jsonl
eval_loss cut.log --sft_data bad.jsonl --sft_eval bad.jsonl --truncation > /dev/null
grep -q "2 examples cut to context+1 tokens" cut.log && pass "--truncation cuts it (in the training and the evaluation set) and says so" ||
  fail "--truncation: $(grep -m1 -E 'error|fine-tuning' cut.log)"
refuse "an id outside the vocabulary" "bad.jsonl:2: input_ids\[1\] is 96, outside the vocabulary of 96" \
  '{"input_ids": [5, 96], "labels": [5, 96]}'

# ---- 5. training on 2 ranks ------------------------------------------------------------------
echo '{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 2, "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}' > z2.json
if "$DSCPP" --num_procs 2 --master_port "$(port)" "$LLAMA" --deepspeed_config z2.json --steps 4 -- --from_hf "$MODEL" \
  --context $CONTEXT --sft_data ids.jsonl --packing > t.log 2>&1; then
  pass "2 ranks, ZeRO-2, packed examples: $(grep -o 'step 4/4 | loss [0-9.]*' t.log)"
else
  fail "training: $(grep -m2 -i error t.log)"
fi
exit $FAILED
