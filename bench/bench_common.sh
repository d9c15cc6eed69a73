# Shell helpers the training benchmarks share (sourced; STEPS is the caller's timed steps, MICRO
# its micro-batch).
# The DeepSpeed config of both sides' runs: AdamW at ZeRO stage STAGE.
config() {  # FILE STAGE
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $MICRO, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "gradient_clipping": 0, "zero_optimization": {"stage": $2},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}}}
JSON
}
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -f %M -o)
timed() {  # RSS_FILE COMMAND...: the command, its largest process's peak RSS (KiB) in RSS_FILE
  local out=$1
  shift
  if [ ${#TIME[@]} -gt 0 ]; then "${TIME[@]}" "$out" "$@"; else echo 0 > "$out"; "$@"; fi
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# The per-step rates of a dscpp log's last STEPS steps, and their median.
step_rates() { grep -o '| [0-9.]* tokens/s' "$1" | awk '{print $2}' | tail -n "$STEPS"; }
dscpp_rate() { step_rates "$1" | median; }
