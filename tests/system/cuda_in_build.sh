#!/usr/bin/env bash
# Fails when nvcc is on this machine but the CUDA targets are missing from the build (they
# must not drop out silently), and runs the CUDA check program when they are there.
#   cuda_in_build.sh HAVE_CUDA(true|false) CUDA_OPTION(auto|enabled|disabled) [CUDA_CHECK_EXE]
set -u
have=$1 option=$2 exe=${3:-}
if [ "$option" = disabled ]; then echo "CUDA disabled for this build"; exit 77; fi
if ! command -v nvcc >/dev/null; then
  [ "$have" = false ] && { echo "no nvcc here; CUDA correctly absent"; exit 77; }
fi
if [ "$have" != true ]; then echo "FAIL: nvcc is present but the CUDA targets are not in this build"; exit 1; fi
"$exe" --allow-no-device
