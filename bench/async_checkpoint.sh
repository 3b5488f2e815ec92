#!/usr/bin/env bash
# The cost of checkpoints to a training run: dtr-train's `small` model at 2 ranks
# with a checkpoint after every step (--ckpt-every 1), written synchronously or in
# the background (--async-ckpt), against no checkpoints, with everything else equal
# (--no-final-checkpoint, no sample; the last step, which evaluates, is left out). The three modes
# run in turn, ROUNDS times, so that a drift of the machine touches all alike.
# Prints per mode the median step time over the steps after the first WARMUP of
# every round (the difference of consecutive elapsed_seconds of metrics.jsonl: a
# step's compute, its checkpoint's copy or write, and with --async-ckpt the commit
# of the one before) and its ratio to "none", the checkpoint's size, the machine
# and the commit.
#   bench/async_checkpoint.sh [BUILD_DIR (build/test)] [STEPS (12)] [ROUNDS (2)]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build/test}
steps=${2:-12}
rounds=${3:-2}
warmup=2
train=$repo/$build/dtr-train/dtr-train
[[ -x $train ]] || { echo "async_checkpoint: no $train (build it first)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_MCA_mpi_yield_when_idle=1
flags=(mpirun --allow-run-as-root --oversubscribe -np 2 "$train" --model small --steps "$steps" --global-batch 8
       --eval-every 0 --eval-batches 1 --log-every "$steps" --sample-tokens 0 --progress-bar off
       --no-final-checkpoint)
declare -A mode_flags=([none]="" [sync]="--ckpt-every 1" [async]="--ckpt-every 1 --async-ckpt")
modes=(none sync async)
for round in $(seq "$rounds"); do
  for mode in "${modes[@]}"; do
    rm -rf "$out/run"
    # shellcheck disable=SC2086
    "${flags[@]}" ${mode_flags[$mode]} --out "$out/run" >"$out/$mode.$round.log" 2>&1 ||
      { cat "$out/$mode.$round.log"; exit 1; }
    sed -nE 's/.*"elapsed_seconds":([0-9.e+-]+).*"step":([0-9]+).*/\2 \1/p' "$out/run/metrics.jsonl" |
      awk -v w="$warmup" -v n="$steps" '$1 > w && $1 < n { print $2 - last } { last = $2 }' >>"$out/$mode.seconds"
    if [[ $mode == sync ]]; then du -sb "$out/run/checkpoints/step_$steps" | cut -f1 >"$out/bytes"; fi
  done
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
none=$(median "$out/none.seconds")
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; commit $(git -C "$repo" rev-parse --short HEAD)"
echo "dtr-train --model small, 2 ranks, $steps steps x $rounds rounds; checkpoint $(awk '{ printf "%.1f MiB", $1 / 1048576 }' "$out/bytes")"
printf "%-6s %12s %10s\n" mode "ms/step" "x none"
for mode in "${modes[@]}"; do
  m=$(median "$out/$mode.seconds")
  awk -v mode="$mode" -v m="$m" -v n="$none" 'BEGIN { printf "%-6s %12.1f %10.3f\n", mode, 1000 * m, m / n }'
done
