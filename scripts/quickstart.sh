#!/usr/bin/env bash
# README command 1: install what is missing, build in Release, run the main example
# (fully_shard training on 2 ranks under mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
OMPI_MCA_mpi_yield_when_idle=1 mpirun "${flags[@]}" -np 2 ./build/release/examples/dtr_train_fsdp
