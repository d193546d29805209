#!/usr/bin/env bash
# Installs the Debian 12 packages edgefl builds, tests and runs with, then fetches the source of
# mbedTLS 3.6 LTS from Debian 13 (fetch-mbedtls.sh: SHA-256 pinned, unpacked under
# platforms/deps/src/). Idempotent; installing needs root (or sudo). Nothing is downloaded from
# anywhere but Debian's archive.
#
#   platforms/deps/setup.sh            # build + test dependencies
#   platforms/deps/setup.sh --cross    # also the ARM cross compilers, QEMU, and zlib for ARM Linux
#   platforms/deps/setup.sh --torch    # also libtorch and PyTorch (examples/pytorch)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

packages=(
  build-essential cmake ninja-build pkg-config
  doctest-dev            # unit tests
  libbenchmark-dev       # micro-benchmarks
  zlib1g-dev             # gzip'd IDX files (Fashion-MNIST)
  libasio-dev            # standalone Asio (server networking)
  libflatbuffers-dev flatbuffers-compiler  # wire protocol
  libsqlite3-dev         # server state
  libpq-dev              # server state in PostgreSQL (--state postgresql://...): its client library
  postgresql-15          # the tests' private PostgreSQL cluster (initdb, pg_ctl; tests/support/postgres_cluster.sh)
  haproxy                # the load balancer in front of edgefl-server (platforms/haproxy; ctest server.haproxy)
  dataset-fashion-mnist  # real training data in /usr/share/datasets/fashion-mnist
  clang                  # libFuzzer targets and the clang build
  libclang-rt-14-dev     # libFuzzer and the sanitizer runtimes for clang (only recommended by clang)
  python3                # helper scripts in tests
  openssl                # tests: CRLs (mbedTLS has no CRL writer)
  debian-archive-keyring bzip2 xz-utils  # fetch-mbedtls.sh: Debian 13's keys; unpacking the tarball
)
cross_packages=(g++-aarch64-linux-gnu g++-arm-linux-gnueabihf  # ARM Linux (glibc) cross compilers
                gcc-arm-none-eabi libnewlib-arm-none-eabi    # bare-metal Cortex-M: compiler, newlib
                libstdc++-arm-none-eabi-dev                  # its C++ headers (<new>, <type_traits>)
                qemu-user qemu-system-arm)                   # qemu-aarch64/-arm; MPS2 boards

torch_packages=(libtorch-dev     # the C++ API of PyTorch 1.13: examples/pytorch's device and server evaluator
                python3-torch)   # PyTorch: the walkthrough's model definition and evaluation

want=("${packages[@]}")
if [[ "${1:-}" == "--cross" ]]; then want+=("${cross_packages[@]}"); fi
if [[ "${1:-}" == "--torch" ]]; then want+=("${torch_packages[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian 13's archive keys came to Debian 12 in debian-archive-keyring 2023.3+deb12u2 (a stable
# update): an older one is upgraded by installing it again.
keyring_version=$(dpkg-query -W -f='${Version}' debian-archive-keyring 2>/dev/null || true)
if [[ -n "$keyring_version" ]] && dpkg --compare-versions "$keyring_version" lt 2023.3+deb12u2; then
  missing+=(debian-archive-keyring)
fi

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#want[@]} packages present"
else
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# mbedTLS 3.6 (Debian 12 has only 2.28: no TLS 1.3, end of life). No root needed.
bash "$here/fetch-mbedtls.sh"
# zlib's static library for arm64 and armhf (edgefl::data in the ARM Linux cross builds). No root.
if [[ "${1:-}" == "--cross" ]]; then bash "$here/fetch-cross-zlib.sh"; fi
echo "setup: done"
