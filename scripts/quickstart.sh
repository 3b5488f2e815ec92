#!/usr/bin/env bash
# README command 1: install what is missing, build in Release (without the tests and
# benchmarks, and without CUDA unless a GPU is visible), then train the tiny
# byte-level model on the embedded corpus with dtr-train on 2 ranks under mpirun
# (fully_shard over the ranks). It prints the loss falling, a text sample from the
# trained model, and writes runs/quickstart/{metrics.jsonl,loss.svg,config.json} and the
# final checkpoint runs/quickstart/checkpoints/step_300 (Ctrl-C saves one and stops).
# Each run starts afresh in runs/quickstart (--overwrite). Extra arguments go to
# dtr-train (e.g. --steps 100; see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The library, dtr-train and the examples; CUDA only where a GPU can run it (the
# test command builds the CUDA parts wherever nvcc exists).
options=(-DDTR_BUILD_TESTS=OFF -DDTR_BUILD_BENCH=OFF)
if nvidia-smi -L >/dev/null 2>&1; then
  options+=(-DDTR_CUDA=AUTO)
else
  echo "quickstart: no GPU visible (nvidia-smi), building for CPU only"
  options+=(-DDTR_CUDA=OFF)
fi
scripts/build.sh release "${options[@]}"
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
OMPI_MCA_mpi_yield_when_idle=1 mpirun "${flags[@]}" -np 2 ./build/release/examples/train/dtr-train \
  --model tiny --steps 300 --out runs/quickstart --overwrite "$@"
