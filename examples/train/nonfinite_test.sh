#!/usr/bin/env bash
# dtr-train with a learning rate that makes the loss NaN within a few steps, on 2
# ranks. Default (--on-nonfinite stop): exit 1 with one line naming the step and
# the quantity, no step with a non-finite loss logged as trained, no checkpoint
# written. --on-nonfinite skip: every step runs, the non-finite ones are marked
# skipped in metrics.jsonl and counted in the last line, and the final checkpoint
# holds the parameters of the last finite step.
#   nonfinite_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi=("$mpiexec" "$@" -np 2 "$train" --model tiny --steps 20 --lr 1e6 --warmup 0 --global-batch 8 --eval-every 0
     --eval-batches 1 --sample-tokens 0 --progress-bar off --log-every 1)

set +e
"${mpi[@]}" --out "$out/stop" > "$out/stop.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "stop: exit 0 on a non-finite loss: $(tail -3 "$out/stop.log")"
line=$(grep -E "^dtr-train: step [0-9]+/20: the (loss is|gradient norm is|loss and the gradient norm are) not finite" \
       "$out/stop.log" | head -1) || fail "stop: no line naming the step: $(cat "$out/stop.log")"
step=$(sed -E 's|^dtr-train: step ([0-9]+)/.*|\1|' <<<"$line")
grep -q "stopped without updating the parameters. Last checkpoint: none" <<<"$line" || fail "stop: $line"
rows=$(wc -l < "$out/stop/metrics.jsonl")
[[ $rows -eq $((step - 1)) ]] || fail "stop: $rows rows in metrics.jsonl, expected $((step - 1)) (steps before $step)"
grep -q '"loss":null' "$out/stop/metrics.jsonl" && fail "stop: a non-finite loss was logged as a trained step"
[[ -e "$out/stop/checkpoints" ]] && fail "stop: wrote $(ls "$out/stop/checkpoints")"
grep -q "^done:" "$out/stop.log" && fail "stop: printed a done line"
echo "ok: stop ended at step $step with exit $rc: $line"

"${mpi[@]}" --on-nonfinite skip --out "$out/skip" > "$out/skip.log" 2>&1 || { cat "$out/skip.log" >&2; fail "skip: exit non-zero"; }
[[ $(wc -l < "$out/skip/metrics.jsonl") -eq 20 ]] || fail "skip: expected 20 rows in metrics.jsonl"
skipped_rows=$(grep -c '"skipped":true' "$out/skip/metrics.jsonl" || true)
[[ $skipped_rows -gt 0 ]] || fail "skip: no step marked skipped"
# A row is skipped exactly when its loss or gradient norm is not finite (null).
if grep '"skipped":true' "$out/skip/metrics.jsonl" | grep -v null; then fail "skip: a finite step was skipped"; fi
if grep -v '"skipped":true' "$out/skip/metrics.jsonl" | grep null; then fail "skip: a non-finite step was kept"; fi
grep -q "^done: 20 steps ($skipped_rows skipped: non-finite loss or gradient norm)" "$out/skip.log" ||
  fail "skip: the last line does not count $skipped_rows skipped steps: $(tail -1 "$out/skip.log")"
[[ -f "$out/skip/checkpoints/step_20/metadata.json" ]] || fail "skip: no final checkpoint"
echo "ok: skip ran 20 steps, skipped $skipped_rows, saved step_20"
echo "PASS: non-finite steps stop the run (exit $rc at step $step) or are skipped ($skipped_rows of 20)"
