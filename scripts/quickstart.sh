#!/usr/bin/env bash
# README command 1: install what is missing, build in Release, run the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
./build/release/examples/dtr_hello
