#!/usr/bin/env bash
# Packs the build for a GPU machine with what tests/gpu/check.sh needs there: runs the bundler
# (below), then adds a reduced Fashion-MNIST under data/fashion-mnist-small/ in the bundle (a GPU
# machine need not have it; the reduced set, not all 30 MB, keeps the bundle small): the first
# 12,000 training images and labels and the full 10,000-image test set, as valid IDX .gz files
# whose headers give the reduced counts. The mlp trains on exactly the samples `--limit 12000`
# takes from the full set.
#
# Usage: bash tests/gpu/pack.sh BUNDLER [BUILD_DIR]   (or GPU_BUNDLER=BUNDLER bash tests/gpu/pack.sh)
#   BUNDLER    the script that packs a build for the GPU machine (a path from the current
#              directory). Run from the repository root as `bash BUNDLER BUILD_DIR`, it writes
#              .gpu/bundle.tar.xz (the build's executables and libraries, the scripts of tests/,
#              the fortunes text, each at its source path) and .gpu/on-device.sh (which unpacks
#              the bundle on the GPU machine and runs its arguments there). It is not part of
#              this repository, since it depends on how the GPU machine is reached.
#   BUILD_DIR  default build.
#   FASHION_MNIST=DIR reads the data from DIR (default /usr/share/datasets/fashion-mnist).
# Then copy .gpu/ to the GPU machine and run there, from the directory that holds it:
#   bash .gpu/on-device.sh bash tests/gpu/check.sh
set -euo pipefail
usage="usage: bash tests/gpu/pack.sh BUNDLER [BUILD_DIR], or GPU_BUNDLER=BUNDLER (see the script's header)"
bundle=${1:-${GPU_BUNDLER:-}}
build=${2:-build}
src=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -n "$bundle" ] || { echo "pack.sh: no bundler given; $usage" >&2; exit 2; }
bundle=$(realpath -e "$bundle" 2> /dev/null) ||
  { echo "pack.sh: the bundler ${1:-$GPU_BUNDLER} does not exist; $usage" >&2; exit 2; }
cd "$(dirname "$0")/../.."
[ -f "$bundle" ] || { echo "pack.sh: the bundler $bundle is not a file; $usage" >&2; exit 2; }
[ -f "$src/train-images-idx3-ubyte.gz" ] || { echo "pack.sh: no Fashion-MNIST in $src" >&2; exit 1; }
# Meson before 1.4 gives nvcc no dependency-file flags, so ninja records no headers for the .cu
# objects and a change to a kernel header (launch.h, map.h, ops_math.h, …) leaves them stale: a
# GPU run would measure the old kernels. Every nvcc object is rebuilt before packing.
ninja -C "$build" -t clean -r cuda_COMPILER > /dev/null
ninja -C "$build" > /dev/null
bash "$bundle" "$build"
[ -f .gpu/bundle.tar.xz ] || { echo "pack.sh: $bundle wrote no .gpu/bundle.tar.xz" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/data/fashion-mnist-small"
python3 - "$src" "$stage/data/fashion-mnist-small" <<'PY'
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
# IDX: magic 0x0000 TT DD (DD = number of dimensions), DD big-endian uint32 sizes, the data.
def cut(name, n):
    with gzip.open(os.path.join(src, name), "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    header = 4 + 4 * dims
    item = 1
    for d in struct.unpack(">" + "I" * (dims - 1), data[8:header]):
        item *= d
    n = min(n, count)
    if len(data) < header + count * item:
        sys.exit(f"pack.sh: {name} is shorter than its header says")
    with gzip.open(os.path.join(dst, name), "wb", compresslevel=9) as f:
        f.write(data[:4] + struct.pack(">I", n) + data[8:header] + data[header:header + n * item])
    print(f"pack.sh: {name}: {n} of {count}")
cut("train-images-idx3-ubyte.gz", 12000)
cut("train-labels-idx1-ubyte.gz", 12000)
cut("t10k-images-idx3-ubyte.gz", 10000)
cut("t10k-labels-idx1-ubyte.gz", 10000)
PY
# Append to the bundle's tar (its members are ./build/..., ./data/...; on-device.sh unpacks
# the whole archive to /tmp/dscpp, so the data lands at data/fashion-mnist-small there).
xz -dc .gpu/bundle.tar.xz > "$stage/bundle.tar"
tar -C "$stage" -rf "$stage/bundle.tar" ./data/fashion-mnist-small
# The Hugging Face parity data (1.3 MB) for check.sh's model-family section.
tar -rf "$stage/bundle.tar" ./tests/data/hf
xz -T0 -6 -c "$stage/bundle.tar" > .gpu/bundle.tar.xz.new
mv .gpu/bundle.tar.xz.new .gpu/bundle.tar.xz
echo "pack.sh: .gpu/bundle.tar.xz $(du -h .gpu/bundle.tar.xz | cut -f1) with data/fashion-mnist-small;" \
  "the GPU machine's copy is .gpu ($(du -sh .gpu | cut -f1) in all)"
