#!/usr/bin/env bash
# dtr-train with a learning rate that makes the loss NaN within a few steps, on 2
# ranks. Default (--on-nonfinite stop): exit 1 with one line naming the step and
# the quantity, no step with a non-finite loss logged as trained, no checkpoint
# written. --on-nonfinite skip: every step runs, the non-finite ones are marked
# skipped in metrics.jsonl and counted in the last line, and the final checkpoint
# holds the parameters of the last finite step. Parameters that are themselves
# not finite (--lr 1e39 overflows an update) are never saved: the save ends the
# run with exit 1 naming them and the last good checkpoint, unless
# --save-nonfinite.
#   nonfinite_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
# The stopped runs' ranks all exit 1 by themselves: mpirun need not wait its
# default second before it SIGKILLs the ranks of a job whose ranks exited non-zero.
export OMPI_MCA_odls_base_sigkill_timeout=0
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
# An update with --lr 1e39 makes the parameters infinite: resumed from a good
# step_1, the save after step 2 refuses them and names step_1.
inf=("$mpiexec" "$@" -np 2 "$train" --model tiny --warmup 0 --global-batch 8 --eval-every 0 --eval-batches 1
     --sample-tokens 0 --progress-bar off --on-nonfinite skip --ckpt-every 1)
"${inf[@]}" --steps 1 --lr 1e-3 --out "$out/inf" > "$out/good.log" 2>&1 || { cat "$out/good.log" >&2; fail "good: exit non-zero"; }
set +e
"${inf[@]}" --steps 2 --lr 1e39 --resume "$out/inf/checkpoints/step_1" --out "$out/inf" > "$out/inf.log" 2>&1
rc_inf=$?
set -e
[[ $rc_inf -eq 1 ]] || fail "inf: exit $rc_inf, expected 1: $(tail -3 "$out/inf.log")"
grep -qE "^dtr-train: step 2/2: not saving checkpoint .*/inf/checkpoints/step_2: [0-9]+ values of 21 parameters are NaN or infinite: tok_embeddings.weight \([0-9]+\)" "$out/inf.log" ||
  fail "inf: no line naming the parameters: $(grep dtr-train: "$out/inf.log")"
grep -q "Last checkpoint: .*/inf/checkpoints/step_1\. " "$out/inf.log" || fail "inf: the last good checkpoint is not named"
[[ $(ls "$out/inf/checkpoints") == step_1 ]] || fail "inf: checkpoints $(ls "$out/inf/checkpoints"), expected step_1 only"
"${inf[@]}" --steps 1 --lr 1e39 --save-nonfinite --out "$out/forced" > "$out/forced.log" 2>&1 ||
  { cat "$out/forced.log" >&2; fail "forced: exit non-zero"; }
[[ -f "$out/forced/checkpoints/step_1/metadata.json" ]] || fail "forced: --save-nonfinite saved no step_1"
echo "ok: infinite parameters are not saved (exit $rc_inf), unless --save-nonfinite"
echo "PASS: non-finite steps stop the run (exit $rc at step $step) or are skipped ($skipped_rows of 20); non-finite parameters are not saved"
