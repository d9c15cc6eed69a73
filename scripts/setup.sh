#!/usr/bin/env bash
# setup.sh — install every Debian package dscpp needs, then nothing else.
# Idempotent: when all packages are present it prints nothing and touches no network.
#
#   scripts/setup.sh [build] [test] [all]      (default: all)
#     build : what building dscpp and running a training job needs (incl. the example data)
#     test  : what the test suite adds (sshd and SLURM testbeds, PyTorch and PyPI safetensors as references)
#
# Needs root to install. Starts no service.
set -euo pipefail

build="g++ cmake meson ninja-build pkg-config git
libopenmpi-dev openmpi-bin libssh2-1-dev libssl-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
catch2 libgloo-dev liburing-dev libaio-dev libopenblas-dev zlib1g-dev
libpcre2-dev libicu-dev libyaml-cpp-dev
dataset-fashion-mnist fortunes dict-freedict-eng-deu"
# The launcher's system tests: real sshd hosts in network namespaces, a real SLURM cluster
# (tests/testbed/netns-hosts.sh, tests/testbed/slurm-local.sh; launch_ssh.sh also uses bc).
test_extra="python3 openssh-server openssh-client iproute2 util-linux mount procps bc
slurmctld slurmd slurm-client munge
python3-numpy python3-pip python3-torch python3-venv"
# PyPI packages the tests use as independent references (checkpoints must open in `safetensors`).
test_pip="safetensors"

want="" want_pip=""
[ $# -eq 0 ] && set -- all
for g in "$@"; do
  case "$g" in
    build) want="$want $build" ;;
    test) want="$want $build $test_extra"; want_pip=$test_pip ;;
    all) want="$want $build $test_extra"; want_pip=$test_pip ;;
    *) echo "setup.sh: unknown group '$g' (expected build, test or all)" >&2; exit 2 ;;
  esac
done

# Installs the PyPI packages that python3 cannot import yet (Debian's pip needs
# --break-system-packages to install outside a virtualenv).
install_pip() {
  local m missing_pip=""
  for m in $want_pip; do /usr/bin/python3 -c "import $m" 2>/dev/null || missing_pip="$missing_pip $m"; done
  [ -z "$missing_pip" ] && return 0
  echo "setup.sh: pip installing$missing_pip"
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip install -q --root-user-action=ignore --break-system-packages $missing_pip
}

# transformers for the Hugging Face parity checks (tests/data/hf/make.sh: regenerating the
# reference data, loading dscpp's exports), in a venv on Debian's torch: PyPI's torch would pull
# gigabytes of CUDA wheels. DeepSpeed's Python classes (its loss scaler, its config rules) are
# test oracles too: DeepSpeed without its compiled ops (DS_BUILD_OPS=0) and without the torch it
# asks for (--no-deps: the classes the tests use run on Debian's torch), plus its small pure-Python
# dependencies. accelerate (also --no-deps; 0.33 is the last release that runs on torch 1.13) lets
# the tests build the HF Trainer's own optimizer and schedule. sentencepiece trains the SentencePiece
# models of the tokenizer parity check and, with protobuf, lets transformers convert them to
# tokenizer.json (T5 and Llama 2 style). sacrebleu is the reference `dscpp bleu` is checked
# against. PEFT makes the LoRA reference data (tests/data/hf/make_lora.py): --no-deps, as its
# metadata asks for torch>=1.13.0, which Debian's 1.13.0a0 does not satisfy (it runs on it); its
# imports are all here but jinja2, which its save_pretrained needs for the model card it writes.
# A failed install only costs those tests (they skip, saying why).
HF_VENV=/opt/dscpp-hf-venv
DEEPSPEED_VERSION=0.19.8
ACCELERATE_VERSION=0.33.0
SENTENCEPIECE_VERSION=0.2.0
PROTOBUF_VERSION=4.25.9
SACREBLEU_VERSION=2.6.0
PEFT_VERSION=0.12.0
JINJA2_VERSION=3.1.6
install_hf_venv() {
  [ -n "$want_pip" ] || return 0
  "$HF_VENV/bin/python" -c "import transformers, safetensors, deepspeed, accelerate, sentencepiece, google.protobuf, sacrebleu, peft, jinja2
assert transformers.__version__ == '4.44.2' and deepspeed.__version__ == '$DEEPSPEED_VERSION'
assert accelerate.__version__ == '$ACCELERATE_VERSION' and sentencepiece.__version__ == '$SENTENCEPIECE_VERSION'
assert google.protobuf.__version__ == '$PROTOBUF_VERSION' and sacrebleu.__version__ == '$SACREBLEU_VERSION'
assert peft.__version__ == '$PEFT_VERSION' and jinja2.__version__ == '$JINJA2_VERSION'" 2>/dev/null &&
    return 0
  [ "$(id -u)" = 0 ] || { echo "setup.sh: $HF_VENV (transformers, PEFT, DeepSpeed) is incomplete and making it needs root" >&2; return 0; }
  echo "setup.sh: making $HF_VENV (transformers 4.44.2, PEFT $PEFT_VERSION and DeepSpeed $DEEPSPEED_VERSION's Python classes on Debian's torch)"
  if ! { { [ -x "$HF_VENV/bin/pip" ] || /usr/bin/python3 -m venv --system-site-packages "$HF_VENV"; } &&
         "$HF_VENV/bin/pip" install -q transformers==4.44.2 safetensors &&
         "$HF_VENV/bin/pip" install -q pydantic hjson py-cpuinfo psutil msgpack ninja einops &&
         DS_BUILD_OPS=0 "$HF_VENV/bin/pip" install -q --no-deps --no-build-isolation "deepspeed==$DEEPSPEED_VERSION" &&
         "$HF_VENV/bin/pip" install -q --no-deps "accelerate==$ACCELERATE_VERSION" &&
         "$HF_VENV/bin/pip" install -q --no-deps "peft==$PEFT_VERSION" &&
         "$HF_VENV/bin/pip" install -q "jinja2==$JINJA2_VERSION" &&
         "$HF_VENV/bin/pip" install -q "sentencepiece==$SENTENCEPIECE_VERSION" "protobuf==$PROTOBUF_VERSION" &&
         "$HF_VENV/bin/pip" install -q "sacrebleu==$SACREBLEU_VERSION"; } \
       > /tmp/dscpp-hf-venv.log 2>&1; then
    echo "setup.sh: warning: could not complete $HF_VENV ($(tail -1 /tmp/dscpp-hf-venv.log)): the transformers, PEFT and DeepSpeed checks will skip" >&2
  fi
}

# PyPI's current accelerate, the reference the Accelerate launch test compares dscpp with: pure
# Python, installed --no-deps into its own folder (the venv keeps 0.33 for the HF Trainer, which
# needs an accelerate that runs on torch 1.13; the test stands in the two torch 2 names the launch
# and plugin code import). A failed install only costs that comparison (it says so).
ACCELERATE_REFERENCE=/opt/dscpp-accelerate
ACCELERATE_REFERENCE_VERSION=1.16.0
install_accelerate_reference() {
  [ -n "$want_pip" ] || return 0
  grep -qx "Version: $ACCELERATE_REFERENCE_VERSION" \
    "$ACCELERATE_REFERENCE/accelerate-$ACCELERATE_REFERENCE_VERSION.dist-info/METADATA" 2>/dev/null && return 0
  [ "$(id -u)" = 0 ] || { echo "setup.sh: $ACCELERATE_REFERENCE is missing and installing it needs root" >&2; return 0; }
  echo "setup.sh: installing accelerate $ACCELERATE_REFERENCE_VERSION into $ACCELERATE_REFERENCE"
  rm -rf "$ACCELERATE_REFERENCE"
  /usr/bin/python3 -m pip install -q --root-user-action=ignore --no-deps --target "$ACCELERATE_REFERENCE" \
    "accelerate==$ACCELERATE_REFERENCE_VERSION" > /tmp/dscpp-accelerate.log 2>&1 ||
    echo "setup.sh: warning: could not install accelerate into $ACCELERATE_REFERENCE ($(tail -1 /tmp/dscpp-accelerate.log)): the Accelerate comparison will skip" >&2
}

# PyPI's tensorboard, which the TensorBoard monitor test reads dscpp's event files with (its
# EventAccumulator), with the protobuf its generated code needs and absl: pure Python, --no-deps
# into its own folder, run by Debian's python3 (the venv's protobuf is older). A failed install
# only costs that test (it skips, saying why).
TENSORBOARD_REFERENCE=/opt/dscpp-tensorboard
TENSORBOARD_PACKAGES="tensorboard==2.21.0 protobuf==6.31.1 absl-py==2.5.1"
install_tensorboard_reference() {
  [ -n "$want_pip" ] || return 0
  [ -f "$TENSORBOARD_REFERENCE/tensorboard-2.21.0.dist-info/METADATA" ] &&
    [ -f "$TENSORBOARD_REFERENCE/protobuf-6.31.1.dist-info/METADATA" ] && return 0
  [ "$(id -u)" = 0 ] || { echo "setup.sh: $TENSORBOARD_REFERENCE is missing and installing it needs root" >&2; return 0; }
  echo "setup.sh: installing $TENSORBOARD_PACKAGES into $TENSORBOARD_REFERENCE"
  rm -rf "$TENSORBOARD_REFERENCE"
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip install -q --root-user-action=ignore --no-deps --target "$TENSORBOARD_REFERENCE" \
    $TENSORBOARD_PACKAGES > /tmp/dscpp-tensorboard.log 2>&1 ||
    echo "setup.sh: warning: could not install tensorboard into $TENSORBOARD_REFERENCE ($(tail -1 /tmp/dscpp-tensorboard.log)): the TensorBoard test will skip" >&2
}

# The cuDNN frontend's headers (header-only C++; PyPI's nvidia-cudnn-frontend wheel carries them
# in include/), for cuDNN's fused attention in a CUDA build: only where the CUDA toolkit and
# cuDNN are present, unpacked into /usr/local/include/cudnn_frontend/include (Meson's default
# cudnn_frontend_dir; the headers include each other as "../include/…", so the folder keeps that
# name). A failed download only costs that feature: the build says it is absent.
CUDNN_FE_VERSION=1.32.0
install_cudnn_frontend() {
  local dest=/usr/local/include/cudnn_frontend/include tmp
  [ -x /usr/local/cuda/bin/nvcc ] && [ -f /usr/local/cuda/include/cudnn.h ] || return 0
  [ -f "$dest/cudnn_frontend_version.h" ] &&
    grep -q "CUDNN_FRONTEND_MINOR_VERSION $(echo $CUDNN_FE_VERSION | cut -d. -f2)\$" "$dest/cudnn_frontend_version.h" &&
    return 0
  [ "$(id -u)" = 0 ] || { echo "setup.sh: the cuDNN frontend headers are missing and installing them needs root" >&2; return 0; }
  tmp=$(mktemp -d)
  echo "setup.sh: fetching the cuDNN frontend $CUDNN_FE_VERSION headers (PyPI nvidia-cudnn-frontend)"
  if /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
       "nvidia-cudnn-frontend==$CUDNN_FE_VERSION" > "$tmp/log" 2>&1 &&
     /usr/bin/python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0]) as z:
    for name in z.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            path = os.path.join(dest, name[len("include/"):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(z.read(name))
PY
  then
    echo "setup.sh: cuDNN frontend headers in $dest"
  else
    echo "setup.sh: warning: could not fetch the cuDNN frontend headers ($(tail -1 "$tmp/log")): building without cuDNN attention" >&2
  fi
  rm -rf "$tmp"
}

missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  install_cudnn_frontend
  install_pip
  install_hf_venv || exit $?
  install_accelerate_reference
  install_tensorboard_reference
  exit $?
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: these packages are missing and installing them needs root:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "setup.sh: installing$missing"
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
install_cudnn_frontend
install_pip
install_hf_venv
install_accelerate_reference
install_tensorboard_reference
echo "setup.sh: done"
