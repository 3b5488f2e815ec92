#!/usr/bin/env bash
# --async-ckpt and --keep-last on 2 ranks. Run S saves a checkpoint every 3 steps
# synchronously, run A the same in the background with --keep-last 2. A's losses
# must equal S's; A's step-9 checkpoint must equal S's byte for byte; A announces
# each periodic checkpoint once it is complete; only A's two newest checkpoints
# remain; resuming from A's step 9 continues with S's losses.
#   async_checkpoint_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--model tiny --steps 12 --global-batch 8 --eval-every 0 --eval-batches 1 --log-every 4 --lr 1e-2
        --sample-tokens 0 --progress-bar off --ckpt-every 3)
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --out "$out/sync"
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --async-ckpt --keep-last 2 --out "$out/async" | tee "$out/async.log"

# "step loss" of every metrics.jsonl line after step $2.
losses_after() {
  awk -v after="$2" -F'"loss":' '{ split($0, s, "\"step\":"); split(s[2], n, /[,}]/); split($2, l, /[,}]/);
                                    if (n[1] + 0 > after) print n[1], l[1] }' "$1"
}
diff <(losses_after "$out/sync/metrics.jsonl" 0) <(losses_after "$out/async/metrics.jsonl" 0) ||
  fail "the losses with --async-ckpt differ from those with synchronous checkpoints"

left=$(cd "$out/async/checkpoints" && echo *)
[[ $left == "step_12 step_9" ]] || fail "--keep-last 2 left '$left', expected step_12 and step_9"
for f in "$out/sync/checkpoints/step_9"/*; do
  cmp "$f" "$out/async/checkpoints/step_9/$(basename "$f")" || fail "step_9/$(basename "$f") differs from the synchronous save"
done
[[ $(ls "$out/async/checkpoints/step_9" | wc -l) -eq $(ls "$out/sync/checkpoints/step_9" | wc -l) ]] ||
  fail "step_9 holds other files than the synchronous save's"
for step in 3 6 9; do
  n=$(grep -c "^saved checkpoint $out/async/checkpoints/step_$step\$" "$out/async.log" || true)
  [[ $n -eq 1 ]] || fail "checkpoint step_$step was announced $n times, expected once"
done

"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --resume "$out/async/checkpoints/step_9" --out "$out/resumed"
diff <(losses_after "$out/sync/metrics.jsonl" 9) <(losses_after "$out/resumed/metrics.jsonl" 9) ||
  fail "resuming from the background checkpoint of step 9 gave other losses than the uninterrupted run"
echo "PASS: --async-ckpt trains as synchronous saves do, writes the same files, --keep-last 2 keeps step_9 and step_12"
