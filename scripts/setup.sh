#!/usr/bin/env bash
# Installs dtr's build dependencies from Debian packages, only those missing.
# Idempotent and silent when everything is already there.
set -euo pipefail

# --tests: also what the test suite needs beyond the build (scripts/test.sh).
# --sanitizers: also clang and its sanitizer and libFuzzer runtimes (scripts/sanitize.sh).
packages=(cmake ninja-build g++ libopenmpi-dev openmpi-bin libeigen3-dev catch2 libspdlog-dev
          librandom123-dev libxxhash-dev nlohmann-json3-dev libcli11-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # qemu-user runs the CPU kernels on emulated CPUs without AVX / AVX-512 (tests/cpu_levels/).
  [[ "$(uname -m)" == "x86_64" ]] && packages+=(qemu-user)
  # The simulated cluster (scripts/cluster/): network namespaces, veth, bridge, tc.
  packages+=(iproute2)
  # Rebuilds of the test loop reuse earlier compiles (the build picks ccache up when installed).
  packages+=(ccache)
fi
if [[ "${1:-}" == "--sanitizers" ]]; then
  packages+=(clang)
  # The runtimes ship per LLVM version: the one of the default clang (Debian 12: 14).
  llvm=$(apt-cache depends clang 2>/dev/null | sed -nE 's/.*Depends: clang-([0-9]+)$/\1/p' | head -1)
  [[ -n "$llvm" ]] && packages+=("libclang-rt-$llvm-dev")
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "dtr setup: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "dtr setup: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
