#!/usr/bin/env bash
# Configures and builds dtr into build/<name> (default: release).
# Usage: scripts/build.sh [name] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-release}
shift || true
mkdir -p build
log="build/configure-$name.log"
cmake -S . -B "build/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build "build/$name" --parallel "$(nproc)"
