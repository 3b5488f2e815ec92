#!/usr/bin/env bash
# Builds build/sanitize: CPU only, clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, with the libFuzzer targets (DTR_FUZZ). Shared by
# scripts/sanitize.sh and scripts/fuzz.sh. Warnings are the gcc build's business
# (scripts/test.sh builds with -Werror); here only the sanitizers judge.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh --sanitizers
CC=clang CXX=clang++ scripts/build.sh sanitize -DDTR_CUDA=OFF -DDTR_BUILD_BENCH=OFF -DDTR_FUZZ=ON \
  "-DDTR_SANITIZE=address;undefined"
