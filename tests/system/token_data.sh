#!/usr/bin/env bash
# The gpt example on pre-tokenized data (--tokens, examples/common/token_file.h): an llm.c-format
# file of a deterministic sequence (each token determines the next) is learned — from ln(64) ≈
# 4.16 to an eval accuracy of 100% — on 1 rank and on 2 ranks at ZeRO stage 2; a headerless
# uint32 file with a token beyond --vocab_size is refused naming the token.
# Usage: token_data.sh DSCPP RUNTIME GPT_SO
set -u
DSCPP=$1 RUNTIME=$2 GPT=$3
WORK=$(mktemp -d /tmp/dscpp_tokens.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
/usr/bin/python3 - "$WORK" <<'PY'
import struct, sys
n = 20000
toks = [(i * 7) % 50 for i in range(n)]
with open(f"{sys.argv[1]}/seq.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *toks))
with open(f"{sys.argv[1]}/raw32.bin", "wb") as f:
    f.write(struct.pack(f"<{n}I", *toks))
PY
cat > "$WORK/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 10, "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}}
JSON
ARGS=(-- --tokens "$WORK/seq.bin" --vocab_size 64 --layers 1 --d_model 32 --heads 2 --context 32)
check() {  # NAME LOG
  local acc
  acc=$(sed -n 's/.*final eval: loss [0-9.]*, accuracy \([0-9.]*\)%, perplexity.*/\1/p' "$2")
  grep -q "tokens $WORK/seq.bin (llm.c v1 (uint16)): 20000 tokens, largest id 49, vocabulary 64" "$2" &&
    [ "$acc" = 100.00 ] && pass "$1: the token sequence is learned (eval accuracy $acc%)" ||
    fail "$1: eval accuracy '${acc:-?}': $(grep -E 'final eval|error' "$2" | head -2)"
}
"$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/c.json" --steps 40 "${ARGS[@]}" > "$WORK/r1.log" 2>&1 ||
  fail "1 rank: $(tail -2 "$WORK/r1.log")"
check "1 rank" "$WORK/r1.log"
"$DSCPP" --num_procs 2 --master_port "$(port)" "$GPT" --deepspeed_config "$WORK/c.json" --steps 40 "${ARGS[@]}" \
  > "$WORK/r2.log" 2>&1 || fail "2 ranks: $(tail -2 "$WORK/r2.log")"
check "2 ranks, stage 2" "$WORK/r2.log"
"$RUNTIME" --model "$GPT" --deepspeed_config "$WORK/c.json" --steps 1 -- --tokens "$WORK/raw32.bin" --token_bytes 4 \
  --vocab_size 40 --layers 1 --d_model 32 --heads 2 --context 32 > "$WORK/bad.log" 2>&1 &&
  fail "a token beyond --vocab_size was accepted" ||
  { grep -q "raw32.bin: token 6 is 42, outside the vocabulary of 40" "$WORK/bad.log" &&
    pass "a token beyond --vocab_size is refused, naming it" || fail "vocabulary check: $(tail -2 "$WORK/bad.log")"; }
exit $FAILED
