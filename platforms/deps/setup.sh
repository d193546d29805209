#!/usr/bin/env bash
# Installs the Debian 12 packages edgefl builds, tests and runs with. Idempotent; needs root
# (or sudo). Nothing is downloaded from anywhere but Debian's archive.
#
#   platforms/deps/setup.sh            # build + test dependencies
#   platforms/deps/setup.sh --cross    # also the ARM cross compilers and QEMU
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  doctest-dev            # unit tests
  libbenchmark-dev       # micro-benchmarks
  zlib1g-dev             # gzip'd IDX files (Fashion-MNIST)
  libasio-dev            # standalone Asio (server networking)
  libflatbuffers-dev flatbuffers-compiler  # wire protocol
  libsqlite3-dev         # server state
  dataset-fashion-mnist  # real training data in /usr/share/datasets/fashion-mnist
  clang                  # libFuzzer targets and the clang build
  python3                # helper scripts in tests
)
cross_packages=(g++-aarch64-linux-gnu g++-arm-linux-gnueabihf gcc-arm-none-eabi
                libnewlib-arm-none-eabi qemu-user qemu-system-arm)

want=("${packages[@]}")
if [[ "${1:-}" == "--cross" ]]; then want+=("${cross_packages[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#want[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
