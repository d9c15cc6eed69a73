#!/usr/bin/env bash
# setup.sh — install every Debian package dscpp needs, then nothing else.
# Idempotent: when all packages are present it prints nothing and touches no network.
#
#   scripts/setup.sh [build] [test] [all]      (default: all)
#     build : what building dscpp and running a training job needs
#     test  : what the test suite adds (sshd and SLURM testbeds)
#
# Needs root to install. Starts no service.
set -euo pipefail

build="g++ cmake meson ninja-build pkg-config git
libopenmpi-dev openmpi-bin libssh2-1-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
catch2 libgloo-dev liburing-dev libaio-dev libopenblas-dev"
# The launcher's system tests: real sshd hosts in network namespaces, a real SLURM cluster.
test_extra="python3 openssh-server openssh-client iproute2 util-linux procps
slurmctld slurmd slurm-client munge"

want=""
[ $# -eq 0 ] && set -- all
for g in "$@"; do
  case "$g" in
    build) want="$want $build" ;;
    test) want="$want $build $test_extra" ;;
    all) want="$want $build $test_extra" ;;
    *) echo "setup.sh: unknown group '$g' (expected build, test or all)" >&2; exit 2 ;;
  esac
done

missing=""
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: these packages are missing and installing them needs root:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "setup.sh: installing$missing"
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "setup.sh: done"
