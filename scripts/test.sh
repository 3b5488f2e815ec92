#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, build with warnings as
# errors, and run the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
scripts/build.sh test -DDTR_WERROR=ON
export OMPI_MCA_mpi_yield_when_idle=1
# GPU tests run only where a GPU is visible; they are always compiled when CUDA is.
skip="gpu"
if nvidia-smi -L >/dev/null 2>&1; then skip="^$"; fi
ctest --test-dir build/test --output-on-failure --timeout 600 -j "$(nproc)" -LE "$skip"
