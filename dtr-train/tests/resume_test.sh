#!/usr/bin/env bash
# Resume test of dtr-train on 2 ranks: run A trains 20 steps and saves a checkpoint
# every 10; run B resumes from A's step-10 checkpoint and trains to 20. B's losses
# for steps 11-20 must equal A's exactly (model, AdamW state, data position, RNG).
#   resume_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
common=(--model tiny --steps 20 --global-batch 8 --eval-every 0 --eval-batches 1 --log-every 10 --lr 1e-2
        --sample-tokens 0 --progress-bar off)
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --ckpt-every 10 --out "$out/a"
[[ -f "$out/a/checkpoints/step_10/metadata.json" ]] || { echo "FAIL: no checkpoint at step 10" >&2; exit 1; }
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --resume "$out/a/checkpoints/step_10" --out "$out/b"
# "step loss" for every metrics.jsonl line after step 10.
after_10() {
  awk -F'"loss":' '{ split($0, s, "\"step\":"); split(s[2], n, /[,}]/); split($2, l, /[,}]/);
                     if (n[1] + 0 > 10) print n[1], l[1] }' "$1"
}
diff <(after_10 "$out/a/metrics.jsonl") <(after_10 "$out/b/metrics.jsonl") || {
  echo "FAIL: the resumed run's losses differ from the uninterrupted run's" >&2
  exit 1
}
lines=$(after_10 "$out/b/metrics.jsonl" | wc -l)
[[ $lines -eq 10 ]] || { echo "FAIL: the resumed run logged $lines steps after step 10, expected 10" >&2; exit 1; }
# Resuming into the run's own --out keeps its records: steps 1-10 as first written,
# 11-20 once each (those of the abandoned continuation replaced), and the plot drawn
# from all 20.
cp -r "$out/a" "$out/c"
head -10 "$out/c/metrics.jsonl" > "$out/c_first10.jsonl"
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --resume "$out/c/checkpoints/step_10" --out "$out/c"
steps=$(sed -E 's|.*"step":([0-9]+).*|\1|' "$out/c/metrics.jsonl" | tr '\n' ' ')
[[ $steps == "$(seq -s ' ' 1 20) " ]] || { echo "FAIL: resuming into its own --out logged steps '$steps'" >&2; exit 1; }
cmp <(head -10 "$out/c/metrics.jsonl") "$out/c_first10.jsonl" ||
  { echo "FAIL: resuming into its own --out changed the rows of steps 1-10" >&2; exit 1; }
diff <(after_10 "$out/a/metrics.jsonl") <(after_10 "$out/c/metrics.jsonl") ||
  { echo "FAIL: steps 11-20 resumed into the same --out differ from the uninterrupted run" >&2; exit 1; }
points=$(grep -o 'points="[^"]*"' "$out/c/loss.svg" | head -1 | tr ' ' '\n' | grep -c ',')
[[ $points -eq 20 ]] || { echo "FAIL: loss.svg plots $points training points, expected 20" >&2; exit 1; }
echo "PASS: steps 11-20 after resuming equal the uninterrupted run; resuming into the same --out keeps steps 1-10"
