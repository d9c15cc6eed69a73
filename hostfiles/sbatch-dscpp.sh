#!/usr/bin/env bash
# Submit with: sbatch hostfiles/sbatch-dscpp.sh PROGRAM [ARGS...]
#
# Inside the allocation dscpp needs no hostfile: it reads SLURM_JOB_NODELIST and the tasks
# (or GPUs) per node, picks the slurm runner and starts every rank with srun, each with
# RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ... set. Run dscpp once, here — not under srun.
#SBATCH --job-name=dscpp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output=dscpp-%j.out
set -euo pipefail
: "${DSCPP:=dscpp}"   # path of the dscpp binary if it is not on PATH
exec "$DSCPP" "$@"
