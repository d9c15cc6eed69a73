#!/usr/bin/env bash
# The `dscpp config` and `dscpp report` commands as a user runs them: exit codes, what goes
# to stdout and stderr, messages with file:line:col.
#   config_cli.sh DSCPP SOURCE_ROOT
set -u
dscpp=$1 root=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for t in "$root"/configs/templates/*.json; do
  if ! "$dscpp" config check "$t" --world_size 4 >"$tmp/out" 2>"$tmp/err"; then
    fail "template $(basename "$t") rejected: $(cat "$tmp/err")"; continue
  fi
  grep -q '^train_batch_size  *32  *derived: micro × accumulation × dp = 8 × 1 × 4' "$tmp/out" ||
    fail "template $(basename "$t"): no derived train_batch_size row"
  grep -q ': OK (ZeRO stage' "$tmp/err" || fail "template $(basename "$t"): no OK line on stderr"
done

# A broken config: exit 1, nothing on stdout, each problem with file:line:col and the fix.
printf '{\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 3, "offload_params": {"device": "cpu"}},\n  "fp16": {"enabled": true}, "bf16": {"enabled": true}\n}\n' >"$tmp/bad.json"
"$dscpp" config check "$tmp/bad.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] || fail "broken config: exit $rc, expected 1"
[ ! -s "$tmp/out" ] || fail "broken config printed to stdout: $(cat "$tmp/out")"
grep -q "bad.json:3:37: error: zero_optimization.offload_params: unknown key; did you mean offload_param?" "$tmp/err" ||
  fail "broken config: unknown-key message missing: $(cat "$tmp/err")"

# An aio value the NVMe offload's I/O engine refuses is refused by the check too, in the same words.
b="$root/tests/data/configs/broken/aio-block-size-misaligned.json"
"$dscpp" config check -q "$b" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "aio-block-size-misaligned.json:5:25: error: aio.block_size: expected a positive multiple of \
4096 bytes (the O_DIRECT alignment) up to 1 GiB, found 1000000" "$tmp/err" || fail "misaligned aio.block_size: exit $rc, $(cat "$tmp/err")"

# The effective config as JSON is itself a valid config.
"$dscpp" config check --json "$root/configs/templates/zero3-offload-cpu.json" >"$tmp/eff.json" 2>/dev/null ||
  fail "--json failed"
"$dscpp" config check -q "$tmp/eff.json" 2>"$tmp/err" || fail "the --json dump does not check: $(cat "$tmp/err")"

# "auto" that needs a run fact names the flag; given the flag, it resolves.
printf '{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,\n "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}\n' >"$tmp/auto.json"
"$dscpp" config check "$tmp/auto.json" >/dev/null 2>"$tmp/err" && fail "unresolvable auto accepted"
grep -q 'pass --hidden_size' "$tmp/err" || fail "auto error does not name --hidden_size: $(cat "$tmp/err")"
"$dscpp" config check "$tmp/auto.json" --hidden_size 512 --world_size 3 >"$tmp/out" 2>"$tmp/err" || fail "auto with facts rejected: $(cat "$tmp/err")"
grep -q '^zero_optimization.reduce_bucket_size  *262144  *auto: hidden² = 512²' "$tmp/out" || fail "reduce_bucket_size not resolved to 512²"
grep -q '^train_batch_size  *12 ' "$tmp/out" || fail "train_batch_size auto not 3 × 2 × 2"

# Valid DeepSpeed that dscpp will not run: the check passes (exit 0, OK) and a note names the key.
u="$root/tests/data/configs/unsupported/bf16-master-weights.json"
"$dscpp" config check -q "$u" 2>"$tmp/err" || fail "valid DeepSpeed refused by config check: $(cat "$tmp/err")"
grep -q "bf16-master-weights.json: note: valid for DeepSpeed, but dscpp's runtime does not implement bf16.bf16_master_weights_and_grads: true" "$tmp/err" &&
  grep -q ': OK (ZeRO stage 2' "$tmp/err" || fail "no note naming bf16_master_weights_and_grads: $(cat "$tmp/err")"

"$dscpp" config check /nonexistent.json 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "/nonexistent.json: error: cannot read the config file: No such file or directory" "$tmp/err" ||
  fail "missing file: exit $rc, $(cat "$tmp/err")"

n=$("$dscpp" config keys | tail -1 | cut -d' ' -f1)
[ "$n" -gt 300 ] 2>/dev/null || fail "config keys lists only '$n' keys"
"$dscpp" report >"$tmp/out" || fail "report failed"
grep -q '^  gloo ' "$tmp/out" && grep -q '^  cuda ' "$tmp/out" || fail "report lacks engines: $(cat "$tmp/out")"
"$dscpp" --help >"$tmp/out" && grep -q 'config check FILE' "$tmp/out" || fail "--help does not explain config check"
"$dscpp" config check >/dev/null 2>&1 && fail "config check without FILE succeeded"

[ "$failures" = 0 ] && echo "config_cli: all checks passed"
exit $(( failures > 0 ))
