#!/usr/bin/env bash
# dtr-train on a full disk (2 ranks, --out on a 1 MiB tmpfs, too small for a
# checkpoint): the run fails with an error naming the file and the OS reason,
# metrics.jsonl holds only whole lines, and the failed checkpoint save leaves no
# staging directory behind. Needs root to mount the tmpfs: skipped otherwise.
#   full_disk_test.sh DTR_TRAIN WORK_DIR MPIEXEC [MPIRUN_FLAGS...]
set -uo pipefail
train=$1 work=$2 mpiexec=$3
shift 3
# A failed save ends every rank (exit 1) and nothing is left to save: mpirun need
# not wait its default second before it SIGKILLs the ranks.
export OMPI_MCA_odls_base_sigkill_timeout=0
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$work/disk"
umount "$work/disk" 2>/dev/null
if ! mount -t tmpfs -o size=1m tmpfs "$work/disk" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (not root, or no mount privilege)"
  exit 77
fi
trap 'umount "$work/disk" 2>/dev/null' EXIT
out=$work/disk/run
"$mpiexec" "$@" -np 2 "$train" --model tiny --steps 6 --ckpt-every 3 --global-batch 8 --eval-every 0 \
  --eval-batches 1 --sample-tokens 0 --progress-bar off --log-every 1 --out "$out" > "$work/full_disk.log" 2>&1
rc=$?
cat "$work/full_disk.log"
[[ $rc -ne 0 ]] || fail "the run exited 0 on a full disk"
grep -Eq "error: .*$out.*No space left on device" "$work/full_disk.log" ||
  fail "no error naming a file under $out and the OS reason"
[[ -e "$out/checkpoints/step_3.tmp" ]] && fail "the failed save left $out/checkpoints/step_3.tmp"
while IFS= read -r line; do
  [[ $line == \{*\} ]] || fail "metrics.jsonl has a cut line: $line"
done < "$out/metrics.jsonl"
# A disk that fills while metrics.jsonl grows (12 KiB: a page each for .lock,
# config.json and metrics): the run ends naming metrics.jsonl, which holds only whole lines.
umount "$work/disk"
mount -t tmpfs -o size=12k tmpfs "$work/disk" || fail "cannot remount the tmpfs"
out=$work/disk/run2
"$mpiexec" "$@" -np 2 "$train" --model tiny --steps 100 --global-batch 8 --eval-every 0 --eval-batches 1 \
  --sample-tokens 0 --progress-bar off --log-every 50 --no-final-checkpoint --out "$out" > "$work/full_disk2.log" 2>&1
rc=$?
[[ $rc -ne 0 ]] || fail "metrics on a full disk: the run exited 0"
grep -Eq "error: writing $out/metrics.jsonl failed after step [0-9]+: No space left on device" "$work/full_disk2.log" ||
  fail "no error naming metrics.jsonl: $(tail -5 "$work/full_disk2.log")"
rows=0
while IFS= read -r line; do
  [[ $line == \{*\} ]] || fail "metrics.jsonl has a cut line: $line"
  rows=$((rows + 1))
done < "$out/metrics.jsonl"
[[ $(tail -c1 "$out/metrics.jsonl" | od -An -c | tr -d ' ') == '\n' ]] || fail "metrics.jsonl does not end with a whole line"
step=$(grep -Eo "failed after step [0-9]+" "$work/full_disk2.log" | head -1 | grep -Eo "[0-9]+$")
[[ $rows -eq $step ]] || fail "metrics.jsonl has $rows rows, the error says it failed after step $step"
echo "ok: metrics on a full disk: $rows whole rows, error after step $step"
echo "PASS: a full disk ends the run naming the file and the reason; whole metrics lines; no staging left"
