#!/usr/bin/env bash
# The GPU speed check, one command on a GPU machine: gpu_parity (every CUDA kernel and library
# call against the CPU table, the new column sums, attention kernels, cuDNN SDPA and
# tensor-core GEMMs included), then bench/bench_train_gpt_gpu.sh (dscpp against PyTorch eager
# at 12 × 768, context 1024, three rounds). About 2 minutes on an H200 (each benchmark run is
# capped at BENCH_RUN_LIMIT seconds).
#   bash tests/gpu/pack.sh BUNDLER                     # here
#   bash .gpu/on-device.sh bash tests/gpu/speed.sh     # there, with .gpu/ copied over
# Usage: speed.sh [BUILD_DIR]
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
echo "== gpu_parity"
timeout -k 10 240 bash "$HERE/gpu_suite.sh" "$BUILD/kernels/cuda/dscpp-cuda-check" "$BUILD/tests/gpu_parity" 2>&1 |
  grep -v -E '^\s*$' | tail -40
echo "gpu_parity exit status: ${PIPESTATUS[0]}"
echo "== benchmark"
bash "$HERE/../../bench/bench_train_gpt_gpu.sh" "$BUILD"
