#!/usr/bin/env bash
# Bad dtr-train flags end the job with exit code 2 and one line naming the flag,
# alone and under mpirun -np 2 (where every rank exits the same way).
#   bad_flags_test.sh DTR_TRAIN WORK_DIR MPIEXEC [MPIRUN_FLAGS...]
set -uo pipefail
train=$1 work=$2 mpiexec=$3
shift 3
failures=0
mkdir -p "$work"
head -c 2048 /dev/zero | tr '\0' x > "$work/bad_magic.bin"  # long enough to have a header

# expect NP FLAG_IN_MESSAGE ARGS...
expect() {
  local np=$1 flag=$2
  shift 2
  local out rc
  if [[ $np == 1 ]]; then
    out=$("$train" "$@" 2>&1)
    rc=$?
  else
    out=$("$mpiexec" "${mpirun_flags[@]}" -np "$np" "$train" "$@" 2>&1)
    rc=$?
  fi
  local lines
  lines=$(grep -c 'dtr-train' <<<"$out")
  if [[ $rc -ne 2 ]] || ! grep -q -- "$flag" <<<"$out" || [[ $lines -ne 1 ]]; then
    echo "FAIL (np $np): dtr-train $* -> exit $rc, expected 2 and one line naming $flag; output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok (np $np, exit $rc): $(grep 'dtr-train' <<<"$out")"
  fi
}
mpirun_flags=("$@")
# Every rank exits 2 by itself: mpirun need not wait its default second before it
# SIGKILLs the ranks of a job whose ranks exited non-zero (2.3 s a case otherwise).
export OMPI_MCA_odls_base_sigkill_timeout=0

for np in 1 2; do
  expect $np --steps --steps -5
  expect $np --steps --steps=-1
  expect $np --global-batch --global-batch 10 --micro-batch 4
  expect $np --model --model no-such-model
  expect $np --device --device gpu
  if ! nvidia-smi -L >/dev/null 2>&1; then  # no GPU here: --device cuda is refused, naming the flag
    expect $np --device --device cuda
  fi
  expect $np --data --data "$work/no/such/file.txt"
  expect $np --schedule --schedule linearish
  expect $np --on-nonfinite --on-nonfinite ignore
  expect $np "--data-format must be auto, bytes or llmc" --data-format parquet
  expect $np --mixed-precision --mixed-precision fp8
  expect $np --activation-checkpointing --activation-checkpointing maybe
  expect $np "magic number" --data "$work/bad_magic.bin"
  expect $np --no-such-flag --no-such-flag 3
  # Numbers out of their type's range, not finite or not numbers (every number flag's
  # cases: cli_test.cpp): refused at the flag, naming it and the value.
  expect $np "--steps must be an integer from 1 to 9223372036854775807, got '99999999999999999999999'" \
    --steps 99999999999999999999999
  expect $np "--lr must be a finite number > 0, got 'inf'" --lr inf
  expect $np "--seed must be an integer from 0 to 18446744073709551615, got '-1'" --seed -1
  expect $np "--val-fraction must be a number in (0, 0.5], got 'nan'" --val-fraction nan
  expect $np "--log-every must be an integer from 1 to 9223372036854775807, got '10x'" --log-every 10x
done
expect 2 --global-batch --global-batch 3

# A DTR_CPU_CAPABILITY that names no level: exit 2 and one line per rank (each rank
# checks its own CPU, as nodes may differ).
for np in 1 2; do
  if [[ $np == 1 ]]; then
    out=$(DTR_CPU_CAPABILITY=sse9 "$train" --steps 1 2>&1)
  else
    out=$(DTR_CPU_CAPABILITY=sse9 "$mpiexec" "${mpirun_flags[@]}" -np "$np" "$train" --steps 1 2>&1)
  fi
  rc=$?
  lines=$(grep -c "DTR_CPU_CAPABILITY='sse9': expected one of baseline, avx2, avx512" <<<"$out")
  if [[ $rc -ne 2 || $lines -ne $np ]]; then
    echo "FAIL (np $np): DTR_CPU_CAPABILITY=sse9 -> exit $rc, expected 2 and $np lines; output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok (np $np, exit $rc): DTR_CPU_CAPABILITY=sse9 refused"
  fi
done

# Captured first: grep -q stops reading at its match, and a help text longer than one
# pipe write would then end dtr-train with SIGPIPE, which pipefail reports.
help_text=$("$train" --help)
if grep -q -- '--global-batch' <<<"$help_text"; then echo "ok: --help lists the flags"; else
  echo "FAIL: --help"; failures=$((failures + 1)); fi
exit $((failures > 0))
