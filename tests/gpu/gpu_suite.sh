#!/usr/bin/env bash
# Runs one program of the GPU suite when this machine has a usable CUDA device; otherwise exits
# 77 (skipped) with dscpp-cuda-check's reason. A device whose cast check fails fails the suite.
# The program may itself exit 77 when it needs more than one device (nccl_vs_gloo).
#   gpu_suite.sh DSCPP_CUDA_CHECK PROGRAM
set -u
check=$1 program=$2
"$check"
rc=$?
[ "$rc" = 77 ] && { echo "SKIP: the GPU suite needs a usable CUDA device (see above)"; exit 77; }
[ "$rc" = 0 ] || { echo "FAIL: dscpp-cuda-check exited $rc"; exit 1; }
exec "$program"
