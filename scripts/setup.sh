#!/usr/bin/env bash
# Installs dtr's build dependencies from Debian packages, only those missing.
# Idempotent and silent when everything is already there.
set -euo pipefail

packages=(cmake ninja-build g++ libopenmpi-dev openmpi-bin libeigen3-dev catch2 libspdlog-dev
          librandom123-dev libxxhash-dev nlohmann-json3-dev libcli11-dev)

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
