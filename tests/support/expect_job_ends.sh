#!/usr/bin/env bash
# Runs an mpirun job that cannot complete normally and passes when it ended by
# itself within 45 s, with a non-zero status and output matching argument 1 (a
# grep -E pattern: the watchdog's message, or mpirun's own report of a dead rank).
# A job whose output has a line starting "skipped:" is a skip (exit 77).
set -uo pipefail
pattern=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout -k 5 45 "$@" >"$log" 2>&1 </dev/null
status=$?
if [[ $status -eq 124 || $status -eq 137 ]]; then
  cat "$log"
  echo "FAIL: the job did not end within 45 s" >&2
  exit 1
fi
if grep -q "^skipped:" "$log"; then
  grep -m1 "^skipped:" "$log"
  exit 77
fi
if [[ $status -eq 0 ]] || ! grep -Eq "$pattern" "$log"; then
  cat "$log"
  echo "FAIL: expected a non-zero exit and output matching: $pattern (exit status $status)" >&2
  exit 1
fi
grep -Em1 "$pattern" "$log"
echo "PASS: the job ended with status $status"
