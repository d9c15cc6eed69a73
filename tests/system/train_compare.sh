# Sourced by the scripts that compare training runs (device_path.sh, tests/gpu/check.sh);
# both set WORK, the directory of configs and logs.
ADAMW='{"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.01}}'
# config NAME STAGE GAS EXTRA_TOP EXTRA_ZERO [OPTIMIZER]: $WORK/NAME.json, the small test run's
# DeepSpeed config (AdamW unless OPTIMIZER is given).
config() {
  cat > "$WORK/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": $3, "steps_per_print": 1,
 "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true, $4
 "zero_optimization": {"stage": $2, "reduce_bucket_size": 20000 $5},
 "optimizer": ${6:-$ADAMW}}
JSON
}
# loss_list LOG: the per-step losses rank 0 printed, one a line.
loss_list() { grep '^\[rank 0\]' "$1" | grep -o 'step [0-9]*/[0-9]* | loss [0-9.]*' | awk '{print $NF}'; }
# max_loss_diff LOG_A LOG_B: "MAX STEPS", the largest |Δloss| over the steps both printed, or
# "none" when either printed none or one printed a step the other did not.
max_loss_diff() {
  paste <(loss_list "$1") <(loss_list "$2") |
    awk '$1 == "" || $2 == "" {bad = 1} {d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++}
         END {if (bad || n < 1) print "none"; else printf "%g %d\n", m, n}'
}
