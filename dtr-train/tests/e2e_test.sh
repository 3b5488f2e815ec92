#!/usr/bin/env bash
# End-to-end test of dtr-train: 30 steps of the tiny model on 2 ranks, then
# dtr_train_check on what it wrote, and the final checkpoint.
#   e2e_test.sh DTR_TRAIN CHECKER OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 check=$2 out=$3 mpiexec=$4
shift 4
rm -rf "$out"
steps=30
"$mpiexec" "$@" -np 2 "$train" --model tiny --steps $steps --global-batch 8 --micro-batch 2 \
  --eval-every 10 --eval-batches 2 --log-every 10 --lr 1e-2 --sample-tokens 40 --progress-bar off --out "$out"
"$check" "$out" $steps
[[ -f "$out/checkpoints/step_$steps/metadata.json" ]] || { echo "FAIL: no final checkpoint step_$steps" >&2; exit 1; }
