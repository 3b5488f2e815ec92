#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, build with warnings as
# errors, and run the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
# GPU tests run only where a GPU is visible; they are always compiled when CUDA is.
gpu_visible=false
if nvidia-smi -L >/dev/null 2>&1; then gpu_visible=true; fi
# Quick to build on a small machine: CUDA (where nvcc is) for one architecture,
# sm_90a, which compiles every kernel including the Hopper GEMM (enough to prove the
# CUDA code compiles with warnings as errors; the release and package builds keep
# every architecture), without device optimization where no GPU will run it, and
# sources compiled in unity batches (the sanitizer build, scripts/sanitize.sh, compiles
# each file alone).
unoptimized=ON skip="gpu"
if $gpu_visible; then unoptimized=OFF skip="^$"; fi
scripts/build.sh test -DDTR_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_UNITY_BUILD=ON \
  -DDTR_CUDA_UNOPTIMIZED=$unoptimized
export OMPI_MCA_mpi_yield_when_idle=1
ctest --test-dir build/test --output-on-failure --timeout 600 -j "$(nproc)" -LE "$skip"
