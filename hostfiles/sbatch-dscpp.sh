#!/usr/bin/env bash
# Submit with: sbatch hostfiles/sbatch-dscpp.sh PROGRAM [ARGS...]
#
# Inside the allocation dscpp needs no hostfile: it reads SLURM_JOB_NODELIST and the tasks
# (or GPUs) per node, picks the slurm runner and starts every rank with srun, each with
# RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ... set. Run dscpp once, here — not under srun.
# The job ends with the exit code of the rank that failed first, and says which rank on which
# node.
#
# dscpp is found as $DSCPP (sbatch --export=ALL,DSCPP=/path/to/dscpp), else on PATH, else
# beside this script as submitted: a build tree's build/launcher/dscpp, or an install's bin/.
# (sbatch runs a copy of this script, so its own path is asked of SLURM.)
#SBATCH --job-name=dscpp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output=dscpp-%j.out
set -uo pipefail

find_dscpp() {
  if [ -n "${DSCPP:-}" ]; then
    [ -x "$DSCPP" ] && { echo "$DSCPP"; return; }
    echo "sbatch-dscpp.sh: DSCPP=$DSCPP is not an executable file" >&2
    return 1
  fi
  command -v dscpp && return
  local script dir
  script=$(scontrol show job "${SLURM_JOB_ID:-}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -1)
  # Command= is as typed at submission: relative to the directory sbatch ran in.
  case $script in /*) ;; ?*) script=${SLURM_SUBMIT_DIR:-.}/$script ;; esac
  dir=$(dirname "${script:-$0}")
  for candidate in "$dir/../build/launcher/dscpp" "$dir/../bin/dscpp" "$dir/dscpp"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  echo "sbatch-dscpp.sh: cannot find dscpp: not on PATH, and not beside ${script:-this script} (../build/launcher/dscpp, ../bin/dscpp); submit with --export=ALL,DSCPP=/path/to/dscpp or put it on PATH" >&2
  return 1
}

dscpp=$(find_dscpp) || exit 127
exec "$dscpp" "$@"
