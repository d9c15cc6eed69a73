#!/usr/bin/env bash
# Accelerate users' config files and launch flags, unchanged:
#   1. for configs written by PyPI's accelerate (every ZeRO stage, offload, one machine and a
#      hostfile, with and without a deepspeed_config_file, with and without flags) the DeepSpeed
#      config dscpp derives equals the one Accelerate's DeepSpeedPlugin builds, and where
#      Accelerate refuses, dscpp refuses naming the same settings (tests/tools/accelerate_cases.py);
#   2. bad files are refused naming file and line; the plan a multi-machine file makes;
#      Accelerate's default config file is read when only flags are given;
#   3. a config file and flags train the gpt example on 2 ranks, to the same weights as the
#      effective DeepSpeed config given directly.
# Usage: accelerate_launch.sh DSCPP GPT_PLUGIN COMPARE_SAFETENSORS [SOURCE_ROOT]
set -u
DSCPP=$(realpath "$1") GPT=$(realpath "$2") COMPARE=$(realpath "$3") SRC=$(realpath "${4:-$(dirname "$0")/../..}")
VENV=${DSCPP_HF_VENV:-/opt/dscpp-hf-venv}
ACCELERATE=${DSCPP_ACCELERATE:-/opt/dscpp-accelerate}
WORK=$(mktemp -d /tmp/dscpp_accelerate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
cd "$WORK" || exit 1
export HOME=$WORK  # no user's default_config.yaml is read by accident

# ---- 1. against Accelerate itself ------------------------------------------------------------
if PYTHONPATH="$ACCELERATE:$SRC/tests/tools" "$VENV/bin/python" -c "import accelerate_oracle" 2> /dev/null; then
  PYTHONPATH="$ACCELERATE:$SRC/tests/tools" "$VENV/bin/python" "$SRC/tests/tools/accelerate_cases.py" "$DSCPP" \
    "$WORK" 2> "$WORK/cases.err" | tee "$WORK/cases.out" | cut -c1-200
  [ "${PIPESTATUS[0]}" = 0 ] || fail "dscpp's DeepSpeed configs differ from Accelerate's (above); $(tail -2 "$WORK/cases.err")"
  [ "$(grep -c '^ok:' "$WORK/cases.out")" -ge 20 ] || fail "fewer cases than written ran: $(tail -2 "$WORK/cases.err")"
else
  echo "skip: no accelerate at $ACCELERATE (scripts/setup.sh test installs it): not compared with Accelerate"
fi

# ---- 2. refusals, plans, the default file ----------------------------------------------------
refuse() {  # NAME PATTERN YAML
  printf '%b' "$3" > bad.yaml
  if "$DSCPP" config check -q --config_file bad.yaml > out 2> err; then
    fail "$1: accepted"
  elif grep -q -- "$2" err; then
    pass "$1: $(tail -1 err)"
  else
    fail "$1: expected /$2/, got: $(cat err)"
  fi
}
refuse "tab indentation" "bad.yaml:3: a tab in the indentation" \
  'distributed_type: DEEPSPEED\ndeepspeed_config:\n\tzero_stage: 2\n'
refuse "duplicate key" "bad.yaml:3: duplicate key 'zero_stage' (first at line 2)" \
  'deepspeed_config:\n  zero_stage: 2\n  zero_stage: 3\ndistributed_type: DEEPSPEED\n'
refuse "wrong type" "bad.yaml:2: num_processes: expected an integer, found 'two'" \
  'distributed_type: NO\nnum_processes: two\n'
refuse "unknown key" "did you mean 'mixed_precision'" 'distributed_type: NO\nmixed_precison: bf16\n'
refuse "FSDP" "FSDP's full sharding is ZeRO stage 3" 'distributed_type: FSDP\n'

cat > multi.yaml <<'YAML'
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_hostfile: hosts
  deepspeed_multinode_launcher: pdsh
  zero_stage: 3
main_process_ip: 10.1.2.3
main_process_port: 29611
num_machines: 2
num_processes: 4
fsdp_config:
  fsdp_sharding_strategy: FULL_SHARD
YAML
printf 'node-a slots=4\nnode-b slots=4\nnode-c slots=4\n' > hosts
if "$DSCPP" --dry_run --config_file multi.yaml "$GPT" > out 2> err; then
  grep -q "^dscpp plan: 4 ranks on 2 hosts from hostfile hosts; runner ssh; master 10.1.2.3:29611$" err &&
    grep -q "not used by dscpp .*fsdp_config (multi.yaml:11)" err &&
    grep -q '^effective deepspeed config: {.*"stage": 3' out &&
    pass "pdsh over a hostfile: the ssh runner, 2 of its 3 hosts, 2 ranks each" ||
    fail "multi-machine plan: $(cat err out | head -20)"
else
  fail "multi-machine dry run: $(cat err)"
fi
sed -i 's/pdsh/standard/' multi.yaml
if "$DSCPP" --dry_run --config_file multi.yaml --machine_rank 1 "$GPT" > out 2> err; then
  grep -q "^dscpp plan: 4 ranks on 2 hosts from 2 machines started one by one; runner local; master 10.1.2.3:29611$" err &&
    grep -q "^  RANK=2$" out && pass "standard: machine 1 starts ranks 2-3 itself" || fail "standard: $(cat err out)"
else
  fail "standard dry run: $(cat err)"
fi

mkdir -p hf/accelerate
printf 'distributed_type: MULTI_CPU\nnum_processes: 3\nmixed_precision: bf16\n' > hf/accelerate/default_config.yaml
if HF_HOME=$WORK/hf "$DSCPP" --dry_run --mixed_precision no /bin/true > out 2> err; then
  grep -q "using Accelerate's default config $WORK/hf/accelerate/default_config.yaml" err &&
    grep -q "^dscpp plan: 3 ranks" err && grep -q '"stage": 0}, "fp16": {"enabled": false}, "bf16": {"enabled": false}' out &&
    grep -q "^  ACCELERATE_MIXED_PRECISION=no$" out &&
    pass "a flag alone reads \$HF_HOME/accelerate/default_config.yaml; the flag wins" ||
    fail "default config: $(cat err out | head)"
else
  fail "default config: $(cat err)"
fi
HF_HOME=$WORK/hf "$DSCPP" --dry_run /bin/true > out 2> err && ! grep -q accelerate err &&
  pass "a plain launch reads no Accelerate file" || fail "plain launch: $(cat err)"

# ---- 3. training: Accelerate's settings == the effective DeepSpeed config given directly ----
GPT_ARGS=(-- --layers 2 --d_model 32 --heads 2 --context 32 --sample_chars 0)
printf 'distributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: true\ndeepspeed_config:\n  zero_stage: 3\n' > train.yaml
P1=$(port)
if "$DSCPP" --config_file train.yaml --zero_stage 2 --gradient_accumulation_steps 2 --main_process_port "$P1" \
  "$GPT" --steps 6 --save_dir a "${GPT_ARGS[@]}" > a.log 2>&1; then
  sed -n 's/^effective deepspeed config: //p' a.log > effective.json
  grep -q '"stage": 2' effective.json && grep -q "ZeRO stage 2" a.log &&
    pass "2 ranks from train.yaml and flags: $(grep -o 'step 6/6.*' a.log | head -1 | cut -c1-90)" ||
    fail "the run did not use the flags' ZeRO stage 2: $(grep -i zero a.log | head -3)"
  P2=$(port)
  if "$DSCPP" --num_procs 2 --master_port "$P2" "$GPT" --deepspeed_config effective.json --steps 6 --save_dir b \
    "${GPT_ARGS[@]}" > b.log 2>&1; then
    "$COMPARE" a/global_step6/zero_pp_rank_0_partitions.safetensors b/global_step6/zero_pp_rank_0_partitions.safetensors \
      > cmp.log 2>&1 && pass "the same weights as the effective config given as --deepspeed_config" ||
      fail "weights differ: $(tail -3 cmp.log)"
  else
    fail "run with the effective config: $(tail -5 b.log)"
  fi
else
  fail "2-rank run from train.yaml: $(tail -5 a.log)"
fi

exit $FAILED
