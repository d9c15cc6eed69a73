# Sourced by the system tests that train the mlp example on Fashion-MNIST. The sourcing script
# sets DSCPP, RUNTIME and MLP first, then gets: a skip (exit 77) when the data set is not
# installed; $WORK, removed at exit; fail/pass (FAILED is 1 after any fail); port (free_port.sh);
# and train RANKS CONFIG LOG [runtime args...], which runs dscpp-runtime alone for 1 rank and the
# launcher for more, with --no_eval and the plugin arguments in the MLP_ARGS array.
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "$(basename "$0" .sh): Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): skipping"
  exit 77
fi
WORK=$(mktemp -d "/tmp/dscpp_$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
pass() { echo "ok: $*"; }
. "$(dirname "${BASH_SOURCE[0]}")/free_port.sh"  # port
train() {
  local ranks=$1 cfg=$2 log=$3
  shift 3
  if [ "$ranks" = 1 ]; then
    "$RUNTIME" --model "$MLP" --deepspeed_config "$cfg" --no_eval "$@" "${MLP_ARGS[@]}" > "$log" 2>&1
  else
    "$DSCPP" --num_procs "$ranks" --master_port "$(port)" "$MLP" --deepspeed_config "$cfg" --no_eval "$@" \
      "${MLP_ARGS[@]}" > "$log" 2>&1
  fi
}
