#!/usr/bin/env bash
# README command 1: install what is missing, build in Release for this machine
# (without the tests and benchmarks, and without CUDA unless a GPU is visible), then train the tiny
# byte-level model on the embedded corpus with dtr-train on 2 ranks under mpirun
# (fully_shard over the ranks). It prints the loss falling, a text sample from the
# trained model, and writes runs/quickstart/{metrics.jsonl,loss.svg,config.json} and the
# final checkpoint runs/quickstart/checkpoints/step_300 (Ctrl-C saves one and stops).
# Each run starts afresh in runs/quickstart (--overwrite). Extra arguments go to
# dtr-train (e.g. --steps 100; see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The library, dtr-train, the examples and tools, quickly: CUDA only where a GPU can
# run it, the CPU kernels only at this machine's instruction-set level, and each
# layer's sources compiled in a few unity batches. (scripts/build.sh and the test
# command build the portable library: every level, and CUDA wherever nvcc exists.)
options=(-DDTR_BUILD_TESTS=OFF -DDTR_BUILD_BENCH=OFF -DDTR_CPU_LEVELS=host -DCMAKE_UNITY_BUILD=ON)
if nvidia-smi -L >/dev/null 2>&1; then
  options+=(-DDTR_CUDA=AUTO)
  gpu="with CUDA"
else
  options+=(-DDTR_CUDA=OFF)
  gpu="for the CPU only (no GPU visible to nvidia-smi)"
fi
echo "quickstart: building $gpu, with the CPU kernels of this machine's instruction-set level only"
scripts/build.sh release "${options[@]}"
# 300 steps unless the arguments name another count.
steps=(--steps 300)
for arg in "$@"; do
  [[ $arg == --steps || $arg == --steps=* ]] && steps=()
done
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
OMPI_MCA_mpi_yield_when_idle=1 mpirun "${flags[@]}" -np 2 ./build/release/dtr-train/dtr-train \
  --model tiny "${steps[@]}" --out runs/quickstart --overwrite "$@"
