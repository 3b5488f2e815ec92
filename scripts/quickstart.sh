#!/usr/bin/env bash
# README command 1: install what is missing, build in Release, then train the tiny
# byte-level model on the embedded corpus with dtr-train on 2 ranks under mpirun
# (fully_shard over the ranks). It prints the loss falling, a text sample from the
# trained model, and writes runs/quickstart/{metrics.jsonl,loss.svg,config.json} and the
# final checkpoint runs/quickstart/checkpoints/step_300 (Ctrl-C saves one and stops).
# Each run starts afresh in runs/quickstart (--overwrite). Extra arguments go to
# dtr-train (e.g. --steps 100; see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
OMPI_MCA_mpi_yield_when_idle=1 mpirun "${flags[@]}" -np 2 ./build/release/examples/train/dtr-train \
  --model tiny --steps 300 --out runs/quickstart --overwrite "$@"
