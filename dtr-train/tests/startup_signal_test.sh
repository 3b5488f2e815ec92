#!/usr/bin/env bash
# A SIGTERM that arrives while dtr-train starts (before MPI init, data loading and
# setup) still stops it gracefully: every rank starts with the signal pending
# (exec_with_pending_sigterm), and the job must stop at its first step boundary,
# save step_1 and exit 0, not run to the end or die unsaved.
#   startup_signal_test.sh EXEC_WITH_PENDING_SIGTERM DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
helper=$1 train=$2 out=$3 mpiexec=$4
shift 4
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
set +e
"$mpiexec" "$@" -np 2 "$helper" "$train" --model tiny --steps 20 --global-batch 8 --eval-every 0 --eval-batches 1 \
  --sample-tokens 0 --progress-bar off --out "$out/run" > "$out/run.log" 2>&1
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "exit $rc: $(tail -5 "$out/run.log")"
grep -q "^stopped by SIGTERM after step 1/20: saved checkpoint .*/run/checkpoints/step_1" "$out/run.log" ||
  fail "no stop after step 1: $(grep -E '^(stopped|done)' "$out/run.log" || tail -3 "$out/run.log")"
[[ -f "$out/run/checkpoints/step_1/metadata.json" ]] || fail "no step_1 checkpoint"
[[ -e "$out/run/checkpoints/step_20" ]] && fail "ran to the end"
echo "PASS: a SIGTERM pending at start-up stopped the job after step 1 with step_1 saved"
