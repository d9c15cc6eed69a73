#!/usr/bin/env bash
# The TensorBoard monitor, read by PyPI's tensorboard (its EventAccumulator; /opt/dscpp-tensorboard
# from scripts/setup.sh, skipped, 77, without it):
#   1. a 2-rank fp16 run with wall_clock_breakdown writes one event file, rank 0's, under
#      output_path/job_name with DeepSpeed's tags (train_loss, lr, loss_scale, the five
#      elapsed_time_ms series) at every step (x = samples), the evaluation's under Eval/, and
#      train_loss and lr equal the CSV monitor's values;
#   2. a run killed after step 8 (checkpoint at 6) leaves a file TensorBoard reads through step 8;
#      the resumed run continues the series: every step once, 1-6 from the first run, 7-12 from
#      the second (the CSV monitor appends, as DeepSpeed's);
#   3. wandb and comet enabled: one warning each at start, and the run goes on;
#   4. the progress line says elapsed and remaining time.
# Usage: tensorboard_monitor.sh DSCPP GPT_PLUGIN
set -u
DSCPP=$(realpath "$1") GPT=$(realpath "$2")
TB=${DSCPP_TENSORBOARD:-/opt/dscpp-tensorboard}
if ! PYTHONPATH=$TB /usr/bin/python3 -c "from tensorboard.backend.event_processing import event_accumulator" 2> /dev/null; then
  echo "tensorboard_monitor: no tensorboard at $TB (scripts/setup.sh test installs it): skipping"
  exit 77
fi
WORK=$(mktemp -d /tmp/dscpp_tensorboard.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "$0")/free_port.sh"  # port
cd "$WORK" || exit 1
GPT_ARGS=(-- --layers 2 --d_model 32 --heads 2 --context 32 --sample_chars 0)
cat > ds.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 4, "wall_clock_breakdown": true,
 "fp16": {"enabled": true, "initial_scale_power": 8},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "tensorboard": {"enabled": true, "output_path": "tb", "job_name": "run"},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"}}
JSON
train() {  # LOG [runtime options...]
  local log=$1
  shift
  "$DSCPP" --num_procs 2 --master_port "$(port)" "$GPT" --deepspeed_config ds.json --steps 12 "$@" "${GPT_ARGS[@]}" \
    > "$log" 2>&1
}

read_events() {  # DIR: every scalar series as "tag step value" lines, as TensorBoard sees them
  PYTHONPATH=$TB /usr/bin/python3 - "$1" <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for e in acc.Scalars(tag):
        print(tag, e.step, repr(e.value))
PY
}

# ---- 1. the tags, every step, the CSV's values -----------------------------------------------
if train a.log --eval_interval 6; then
  files=$(find tb/run -name 'events.out.tfevents.*' | wc -l)
  [ "$files" = 1 ] && pass "one event file (rank 0's): $(ls tb/run)" || fail "$files event files in tb/run: $(ls -R tb)"
  read_events tb/run > a.events 2> a.err || fail "TensorBoard cannot read it: $(tail -3 a.err)"
  for tag in train_loss lr loss_scale elapsed_time_ms_forward elapsed_time_ms_backward elapsed_time_ms_backward_inner \
    elapsed_time_ms_backward_allreduce elapsed_time_ms_step; do
    n=$(grep -c "^Train/Samples/$tag " a.events)
    [ "$n" = 12 ] || fail "Train/Samples/$tag: $n points, expected 12 (one per step)"
  done
  [ "$(grep -c '^Eval/Samples/eval_loss ' a.events)" = 2 ] && grep -q '^Eval/Samples/eval_perplexity ' a.events &&
    pass "Eval/Samples/eval_{loss,accuracy,perplexity} at step 6 and at the end" ||
    fail "eval tags: $(grep Eval a.events)"
  # x = samples: 2 ranks x micro-batch 4 = 8 per step.
  grep -q "^Train/Samples/train_loss 96 " a.events && pass "x-axis: samples (step 12 at 96)" ||
    fail "train_loss steps: $(grep train_loss a.events | cut -d' ' -f2 | tr '\n' ' ')"
  if /usr/bin/python3 - a.events csv/run <<'PY'; then
import csv, sys
events = {}
for line in open(sys.argv[1]):
    tag, step, value = line.split()
    events[(tag, int(step))] = float(value)
bad = 0
for tag in ("Train/Samples/train_loss", "Train/Samples/lr"):
    rows = list(csv.reader(open(f"{sys.argv[2]}/{tag.replace('/', '_')}.csv")))[1:]
    for step, value in rows:
        tb = events.get((tag, int(step)))
        # TensorBoard's simple_value is a float32: 1 part in 2^24.
        if tb is None or abs(tb - float(value)) > 1.2e-7 * max(abs(float(value)), 1e-30):
            print(f"{tag} at {step}: csv {value}, tensorboard {tb}"); bad = 1
    print(f"{tag}: {len(rows)} points equal the CSV monitor's")
sys.exit(bad)
PY
    pass "train_loss and lr equal the CSV monitor's"
  else
    fail "TensorBoard and CSV values differ"
  fi
  grep -q "Train/Samples/loss_scale 8 256.0" a.events && pass "loss_scale starts at 2^8" ||
    fail "loss_scale: $(grep loss_scale a.events | head -2)"
  grep -q "monitors (x-axis: samples): tensorboard: tb/run/events.out.tfevents" a.log ||
    fail "the log does not say where the monitors write: $(grep -i monitor a.log)"
else
  fail "the 2-rank run: $(tail -5 a.log)"
fi
line=$(grep "step 4/12" a.log | head -1)
[[ "$line" =~ \|\ [0-9]+s\ elapsed,\ ETA\ [0-9]+s$ ]] && pass "progress line: ...${line: -30}" ||
  fail "no elapsed/ETA on the progress line: $line"

# ---- 2. killed, then resumed -----------------------------------------------------------------
rm -rf tb csv
DSCPP_FAULT_INJECT=crash_after_step:8 train b.log --save_dir ckpt --save_interval 6 && fail "the crash was not injected"
read_events tb/run > b.events 2> b.err || fail "TensorBoard cannot read the killed run's file: $(tail -3 b.err)"
last=$(grep "^Train/Samples/train_loss " b.events | tail -1 | cut -d' ' -f2)
[ "$last" = 64 ] && pass "the killed run's file reads through step 8 (64 samples)" ||
  fail "the killed run's file ends at $last samples: $(tail -3 b.events)"
if train c.log --load_dir ckpt --save_dir ckpt; then
  grep -q "global_step6" c.log || fail "the second run did not resume from step 6: $(head -5 c.log)"
  read_events tb/run > c.events 2> c.err || fail "TensorBoard cannot read the resumed run: $(tail -3 c.err)"
  steps=$(grep "^Train/Samples/train_loss " c.events | cut -d' ' -f2 | tr '\n' ' ')
  [ "$steps" = "8 16 24 32 40 48 56 64 72 80 88 96 " ] && pass "resumed: every step once ($steps)" ||
    fail "resumed series: $steps"
  # Steps 1-6 are the first run's, 7-12 the second's (the first run's 7-8 are gone).
  first6=$(grep "^Train/Samples/train_loss " b.events | head -6)
  [ "$(grep "^Train/Samples/train_loss " c.events | head -6)" = "$first6" ] &&
    pass "steps 1-6 as the first run wrote them" || fail "steps 1-6 changed"
  # The CSV is appended to, as DeepSpeed's: the killed run's 8 rows, then the resumed run's 6.
  rows=$(tail -n +2 csv/run/Train_Samples_train_loss.csv | cut -d, -f1 | tr '\n' ' ')
  [ "$rows" = "8 16 24 32 40 48 56 64 56 64 72 80 88 96 " ] && [ "$(head -1 csv/run/Train_Samples_train_loss.csv)" = \
    "step,train_loss" ] && pass "the CSV monitor appends: $rows" || fail "CSV after the resume: $rows"
else
  fail "the resumed run: $(tail -5 c.log)"
fi

# ---- 3. wandb and comet ----------------------------------------------------------------------
sed 's/"tensorboard"/"wandb": {"enabled": true}, "comet": {"enabled": true}, "tensorboard"/' ds.json > ds2.json
if "$DSCPP" --num_procs 1 --master_port "$(port)" "$GPT" --deepspeed_config ds2.json --steps 2 "${GPT_ARGS[@]}" \
  > d.log 2>&1; then
  [ "$(grep -c "wandb.enabled: true: dscpp writes nothing to Weights & Biases" d.log)" = 1 ] &&
    [ "$(grep -c "comet.enabled: true: dscpp writes nothing to Comet" d.log)" = 1 ] &&
    pass "wandb and comet: one warning each, and the run goes on" || fail "warnings: $(grep -i -E 'wandb|comet' d.log)"
else
  fail "a run with wandb enabled: $(tail -3 d.log)"
fi

exit $FAILED
