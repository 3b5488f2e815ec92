#!/usr/bin/env bash
# Final checkpoint test of dtr-train on 2 ranks: a run without --ckpt-every still
# saves <out>/checkpoints/step_<steps> at the end (and names it in its last line);
# --resume from it with more --steps continues at the next step; with
# --no-final-checkpoint no checkpoint is written; resuming at or past --steps says
# there is nothing to train and prints no figures.
#   final_checkpoint_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
mkdir -p "$out"
common=(--model tiny --global-batch 8 --eval-every 0 --eval-batches 1 --log-every 5 --lr 1e-2
        --sample-tokens 0 --progress-bar off)
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {  # run NAME ARGS...: a 2-rank run logging to $out/NAME.log
  local name=$1
  shift
  "$mpiexec" "$@" > "$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; fail "$name: dtr-train failed"; }
}
steps_of() { sed -E 's|.*"step":([0-9]+).*|\1|' "$1" | tr '\n' ' '; }
mpi=("$@" -np 2 "$train" "${common[@]}")

run a "${mpi[@]}" --steps 6 --out "$out/a"
[[ -f "$out/a/checkpoints/step_6/metadata.json" ]] || fail "a: no final checkpoint $out/a/checkpoints/step_6"
ls "$out/a/checkpoints" | grep -qvx step_6 && fail "a: checkpoints other than step_6: $(ls "$out/a/checkpoints")"
grep -q "^done: 6 steps.*, checkpoint $out/a/checkpoints/step_6\$" "$out/a.log" ||
  fail "a: the last line does not name the final checkpoint"

run b "${mpi[@]}" --steps 9 --resume "$out/a/checkpoints/step_6" --no-final-checkpoint --out "$out/b"
[[ $(steps_of "$out/b/metrics.jsonl") == "7 8 9 " ]] ||
  fail "b: resumed from step 6 logged steps '$(steps_of "$out/b/metrics.jsonl")', expected 7 8 9"
[[ -e "$out/b/checkpoints" ]] && fail "b: --no-final-checkpoint still wrote $(ls "$out/b/checkpoints")"
# Resuming at or past --steps: nothing to train, said in one line; no step, no figures, no checkpoint.
for steps in 6 4; do
  run "done_$steps" "${mpi[@]}" --steps "$steps" --resume "$out/a/checkpoints/step_6" --out "$out/done_$steps"
  grep -q "^nothing to train: $out/a/checkpoints/step_6 is after step 6 and --steps is $steps;" "$out/done_$steps.log" ||
    fail "done_$steps: no 'nothing to train' line: $(cat "$out/done_$steps.log")"
  grep -Eq "^done:|tokens/s|^step " "$out/done_$steps.log" && fail "done_$steps: printed figures: $(cat "$out/done_$steps.log")"
  [[ -e "$out/done_$steps/checkpoints" ]] && fail "done_$steps: wrote $(ls "$out/done_$steps/checkpoints")"
done
echo "PASS: final checkpoint step_6 written without --ckpt-every, resumed to step 9, none with --no-final-checkpoint;"\
     "resuming at or past --steps trains nothing and says so"
