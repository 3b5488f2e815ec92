#!/usr/bin/env bash
# --tp: FSDP over tensor-parallel groups. Run A trains 20 steps at 4 ranks as
# 2 data-parallel x 2 tensor-parallel, run B at 4 ranks with FSDP alone: the same
# samples in the same order, and the same losses to 1e-5 relative. A's step-10
# checkpoint resumes at --tp 1 on 4 ranks and on 1 rank, and B's at --tp 2 on 2
# ranks (1 x 2), each with the losses of steps 11-20 of the run it came from. Run
# C is A with sequence and loss parallelism: B's losses, and B's greedy sample
# (generation pads the window for sequence parallelism and gathers the split
# logits). A --tp that does not divide the ranks is refused with exit 2, naming
# both, and so is a sequence that does not divide by --tp under --sequence-parallel.
#   tensor_parallel_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--model tiny --steps 20 --global-batch 16 --eval-every 0 --eval-batches 1 --log-every 10
        --progress-bar off --no-final-checkpoint --log-samples --ckpt-every 10)
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --sample-tokens 0 --tp 2 --out "$out/a" >"$out/a.log"
grep -q "FSDP over 2 ranks x tensor parallel 2" "$out/a.log" || { cat "$out/a.log"; fail "the header does not name the mesh"; }
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --sample-tokens 24 --out "$out/b" >"$out/b.log"
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --sample-tokens 24 --tp 2 --sequence-parallel --loss-parallel \
  --out "$out/c" >"$out/c.log"
grep -q "x tensor parallel 2 (sequence parallel, loss parallel)" "$out/c.log" ||
  { cat "$out/c.log"; fail "the header does not name sequence and loss parallelism"; }

# "step samples" and "step loss" per step after `after`.
samples() { sed -nE 's/.*"samples":\[([0-9,]*)\].*"step":([0-9]+).*/\2 \1/p' "$1" | awk -v after="$2" '$1 > after'; }
losses() {
  awk -F'"loss":' -v after="$2" '{ split($0, s, "\"step\":"); split(s[2], n, /[,}]/); split($2, l, /[,}]/);
                                   if (n[1] + 0 > after) print n[1], l[1] }' "$1"
}
# Same steps and losses to 1e-5 relative in two metrics files after step `after`.
same_losses() {
  local want=$1 got=$2 after=$3 what=$4
  [[ $(losses "$want" "$after" | wc -l) -eq $((20 - after)) ]] || fail "$what: $want lacks steps"
  paste <(losses "$want" "$after") <(losses "$got" "$after") |
    awk -v what="$what" '{ d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > max) max = r;
                           if ($1 != $3 || r > 1e-5) { bad = 1; print "step " $1 ": " $2 " vs " $4 } }
                         END { printf "%s: largest relative loss difference %.2e\n", what, max; exit bad }' ||
    fail "$what: the losses differ"
}
diff <(samples "$out/a/metrics.jsonl" 0) <(samples "$out/b/metrics.jsonl" 0) ||
  fail "--tp 2 trained on other samples than FSDP alone"
same_losses "$out/b/metrics.jsonl" "$out/a/metrics.jsonl" 0 "--tp 2 against FSDP alone, 20 steps"
same_losses "$out/b/metrics.jsonl" "$out/c/metrics.jsonl" 0 "--tp 2 --sequence-parallel --loss-parallel, 20 steps"
sample() { sed -n '/^sample (greedy/,$p' "$1"; }
[[ -n $(sample "$out/b.log") ]] || { cat "$out/b.log"; fail "FSDP alone printed no sample"; }
diff <(sample "$out/b.log") <(sample "$out/c.log") || fail "sequence and loss parallel generated another sample"

"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --sample-tokens 0 --tp 1 --resume "$out/a/checkpoints/step_10" --out "$out/a_tp1" >/dev/null
same_losses "$out/a/metrics.jsonl" "$out/a_tp1/metrics.jsonl" 10 "2 x 2 resumed at --tp 1 on 4 ranks"
"$mpiexec" "$@" -np 1 "$train" "${common[@]}" --sample-tokens 0 --resume "$out/a/checkpoints/step_10" --out "$out/a_one" >/dev/null
same_losses "$out/a/metrics.jsonl" "$out/a_one/metrics.jsonl" 10 "2 x 2 resumed on 1 rank"
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --sample-tokens 0 --tp 2 --resume "$out/b/checkpoints/step_10" --out "$out/b_tp2" >/dev/null
same_losses "$out/b/metrics.jsonl" "$out/b_tp2/metrics.jsonl" 10 "4 x 1 resumed at 1 x 2"

status=0
"$mpiexec" "$@" -np 4 "$train" "${common[@]}" --sample-tokens 0 --tp 3 --out "$out/bad" >"$out/bad.log" 2>&1 || status=$?
[[ $status -eq 2 ]] || { cat "$out/bad.log"; fail "--tp 3 at 4 ranks exited $status, expected 2"; }
grep -q -- "--tp 3 does not divide the 4 ranks" "$out/bad.log" || { cat "$out/bad.log"; fail "--tp 3 not explained"; }
status=0
"$mpiexec" "$@" -np 2 "$train" "${common[@]}" --sample-tokens 0 --tp 2 --sequence-parallel --seq-len 63 --out "$out/bad_seq" \
  >"$out/bad_seq.log" 2>&1 || status=$?
[[ $status -eq 2 ]] || { cat "$out/bad_seq.log"; fail "--sequence-parallel --seq-len 63 exited $status, expected 2"; }
grep -q -- "--seq-len 63 does not divide by 2" "$out/bad_seq.log" || { cat "$out/bad_seq.log"; fail "--seq-len 63 not explained"; }
echo "PASS: --tp 2 trains as FSDP alone, with and without sequence and loss parallelism; its checkpoints resume at --tp 1, on 1 rank, and 1-D ones at --tp 2"
