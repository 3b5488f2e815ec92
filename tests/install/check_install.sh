#!/usr/bin/env bash
# Installs the built dtr into a temporary prefix, then configures, builds and runs
# a separate project that uses it through find_package(dtr).
# Usage: check_install.sh <dtr build dir> <consumer source dir> <scratch dir>
set -euo pipefail
build=$1 consumer=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$consumer" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/build" >/dev/null
"$scratch/build/consumer"
