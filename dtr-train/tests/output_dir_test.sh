#!/usr/bin/env bash
# dtr-train's --out (2 ranks): a new run into an --out holding an earlier run's
# checkpoints is refused (exit 2, naming them and --resume / --overwrite) and with
# --overwrite starts afresh; a second job with the --out of a running job fails at
# its start naming the running job's pid and host.
#   output_dir_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
# The refused runs' ranks all exit 2 by themselves: mpirun need not wait its
# default second before it SIGKILLs the ranks of a job whose ranks exited non-zero.
export OMPI_MCA_odls_base_sigkill_timeout=0
rm -rf "$out"
mkdir -p "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi=("$mpiexec" "$@" -np 2 "$train" --model tiny --global-batch 8 --eval-every 0 --eval-batches 1 --sample-tokens 0
     --progress-bar off)

"${mpi[@]}" --steps 2 --out "$out/x" > "$out/first.log" 2>&1 || { cat "$out/first.log" >&2; fail "the first run failed"; }
set +e
"${mpi[@]}" --steps 2 --out "$out/x" > "$out/again.log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "a new run into an --out with checkpoints exited $rc, expected 2: $(cat "$out/again.log")"
grep -qF "dtr-train: --out $out/x holds checkpoints of an earlier run (step_2); pass --resume $out/x/checkpoints/<step> to continue it, or --overwrite" \
  "$out/again.log" || fail "no message naming the checkpoints: $(cat "$out/again.log")"
echo "ok: a new run into an --out with checkpoints is refused"
"${mpi[@]}" --steps 1 --out "$out/x" --overwrite > "$out/overwrite.log" 2>&1 ||
  { cat "$out/overwrite.log" >&2; fail "--overwrite failed"; }
[[ $(ls "$out/x/checkpoints") == step_1 ]] || fail "--overwrite left $(ls "$out/x/checkpoints")"
echo "ok: --overwrite starts afresh"

# A long job holds --out y; a second job into y fails at once, naming the first.
"${mpi[@]}" --steps 100000 --log-every 1000 --no-final-checkpoint --out "$out/y" > "$out/long.log" 2>&1 &
long=$!
trap 'kill -KILL $long 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "^dtr-train: model" "$out/long.log" 2>/dev/null && break
  sleep 0.2
done
grep -q "^dtr-train: model" "$out/long.log" || fail "the long job did not start: $(cat "$out/long.log")"
set +e
"${mpi[@]}" --steps 2 --out "$out/y" > "$out/second.log" 2>&1
rc=$?
set -e
kill -USR1 $long  # mpirun forwards it: the long job saves and stops
wait $long || true
[[ $rc -eq 2 ]] || fail "a second job into a running job's --out exited $rc, expected 2: $(cat "$out/second.log")"
grep -Eq "dtr-train: --out $out/y is in use by another dtr-train job \(pid [0-9]+ on host [^,]+, since " \
  "$out/second.log" || fail "no message naming the holder: $(cat "$out/second.log")"
echo "ok: $(grep -o 'is in use by another dtr-train job ([^)]*)' "$out/second.log")"
echo "PASS: --out is refused when it holds checkpoints (unless --overwrite) and while another job uses it"
