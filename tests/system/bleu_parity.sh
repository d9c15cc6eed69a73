#!/usr/bin/env bash
# `dscpp bleu` as a user runs it: its errors (line counts, UTF-8, option values), stdin and gzip
# input; then against PyPI sacreBLEU on Debian's fortunes, perturbed (bleu_parity.py says how):
# 1 and 2 references, each smoothing method, lowercase on and off, both tokenizers, chrF, and
# sentence-level scores. The sacreBLEU half needs the venv scripts/setup.sh makes, with
# sacrebleu; without it the test ends there, skipped (77).
# Usage: bleu_parity.sh DSCPP
set -u
DSCPP=$1
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

printf 'The cat sat on the mat.\nA dog, 1,000.5 cats.\nok\n' > "$tmp/ref"
printf 'The cat is on the mat.\nA dog, 1,000.5 cats.\n' > "$tmp/hyp2"
"$DSCPP" bleu "$tmp/ref" -i "$tmp/hyp2" > "$tmp/out" 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] || fail "line count mismatch: exit $rc, expected 1"
grep -qF "the hypotheses ($tmp/hyp2) have 2 lines but the reference $tmp/ref has 3" "$tmp/err" ||
  fail "line count mismatch: message $(cat "$tmp/err")"
[ ! -s "$tmp/out" ] || fail "line count mismatch printed a score: $(cat "$tmp/out")"

printf 'The cat is on the mat.\nA dog, 1,000.5 cats.\nok' > "$tmp/hyp"  # no newline at the end
printf 'The cat is on the mat.\n\xff bad\nok\n' > "$tmp/latin1"
"$DSCPP" bleu "$tmp/ref" -i "$tmp/latin1" 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -qF "$tmp/latin1:2: not UTF-8" "$tmp/err" || fail "invalid UTF-8: exit $rc, $(cat "$tmp/err")"
"$DSCPP" bleu "$tmp/ref" -i "$tmp/hyp" --smooth-method add_k 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -qF "expected exp, none, floor or add-k" "$tmp/err" ||
  fail "unknown smoothing: exit $rc, $(cat "$tmp/err")"
"$DSCPP" bleu "$tmp/ref" -i "$tmp/hyp" --tokenize intl 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -qF "expected 13a or none" "$tmp/err" || fail "unknown tokenizer: exit $rc, $(cat "$tmp/err")"

# sacrebleu 2.6.0 prints these numbers for the two files.
want="BLEU = 73.35 92.9/81.8/66.7/57.1 (BP = 1.000 ratio = 1.000 hyp_len = 14 ref_len = 14)"
got=$("$DSCPP" bleu "$tmp/ref" -i "$tmp/hyp") || fail "scoring a file failed"
[ "$got" = "$want" ] || fail "score: $got, expected $want"
got=$("$DSCPP" bleu "$tmp/ref" < "$tmp/hyp") || fail "scoring stdin failed"
[ "$got" = "$want" ] || fail "score from stdin: $got, expected $want"
gzip -c "$tmp/ref" > "$tmp/ref.gz"
got=$("$DSCPP" bleu "$tmp/ref.gz" -i "$tmp/hyp") || fail "scoring against a .gz reference failed"
[ "$got" = "$want" ] || fail "score against a .gz reference: $got, expected $want"
got=$("$DSCPP" bleu "$tmp/ref" -i "$tmp/hyp" -b -w 1) || fail "-b -w 1 failed"
[ "$got" = "73.3" ] || fail "-b -w 1: $got, expected 73.3"

if [ "$failures" != 0 ]; then
  echo "bleu_parity: $failures problem(s) with the command itself"
  exit 1
fi
echo "bleu_parity: the command's errors, stdin, gzip and -b as expected"
if ! "$VENV/bin/python" -c "import sacrebleu" 2> /dev/null; then
  echo "bleu_parity: no sacrebleu in the venv at $VENV (scripts/setup.sh test makes it): skipping the comparison"
  exit 77
fi
exec "$VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/bleu_parity.py" "$DSCPP"
