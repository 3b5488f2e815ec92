#!/usr/bin/env bash
# The exact data position at any world size: run A trains 10 steps at 4 ranks
# (global batch 12) with a checkpoint at step 5; runs resumed from it at 3 and at
# 2 ranks must train steps 6-10 on the same samples as A, in the same order (each
# step's global sample indices, --log-samples), with A's losses to 1e-5 relative
# (the ranks sum in another order). At 5 ranks, which cannot divide the global
# batch, the resume is refused with exit 2, naming the numbers.
#   resume_world_size_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--model tiny --steps 10 --global-batch 12 --eval-every 0 --eval-batches 1 --log-every 5 --lr 1e-2
        --sample-tokens 0 --progress-bar off --no-final-checkpoint --log-samples)
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --ckpt-every 5 --out "$out/a" >/dev/null

# One line per step after 5: "step <samples>" and "step loss".
samples_after_5() { sed -nE 's/.*"samples":\[([0-9,]*)\].*"step":([0-9]+).*/\2 \1/p' "$1" | awk '$1 > 5'; }
losses_after_5() {
  awk -F'"loss":' '{ split($0, s, "\"step\":"); split(s[2], n, /[,}]/); split($2, l, /[,}]/);
                     if (n[1] + 0 > 5) print n[1], l[1] }' "$1"
}
[[ $(samples_after_5 "$out/a/metrics.jsonl" | wc -l) -eq 5 ]] || fail "run A logged no samples for steps 6-10"
for np in 3 2; do
  "$mpiexec" "$@" -np $np "$train" "${common[@]}" --resume "$out/a/checkpoints/step_5" --out "$out/r$np" >/dev/null
  diff <(samples_after_5 "$out/a/metrics.jsonl") <(samples_after_5 "$out/r$np/metrics.jsonl") ||
    fail "resumed at $np ranks, steps 6-10 trained on other samples than at 4 ranks"
  paste <(losses_after_5 "$out/a/metrics.jsonl") <(losses_after_5 "$out/r$np/metrics.jsonl") |
    awk -v np="$np" '{ d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > max) max = r;
                       if ($1 != $3 || r > 1e-5) { bad = 1; print "step " $1 ": " $2 " at 4 ranks, " $4 " at " np } }
                     END { printf "resumed at %d ranks: largest relative loss difference %.2e\n", np, max; exit bad }' ||
    fail "resumed at $np ranks, the losses of steps 6-10 differ from the run at 4 ranks"
done

status=0
"$mpiexec" "$@" -np 5 "$train" "${common[@]}" --resume "$out/a/checkpoints/step_5" --out "$out/r5" \
  >"$out/r5.log" 2>&1 || status=$?
[[ $status -eq 2 ]] || { cat "$out/r5.log"; fail "resuming at 5 ranks exited $status, expected 2"; }
grep -q -- "--global-batch 12 is not divisible by the number of ranks (5)" "$out/r5.log" ||
  { cat "$out/r5.log"; fail "resuming at 5 ranks did not name the global batch and the ranks"; }
echo "PASS: resumed at 3 and 2 ranks, steps 6-10 train on the samples and with the losses of the run at 4 ranks"
