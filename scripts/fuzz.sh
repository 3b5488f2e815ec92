#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of outside bytes (tests/fuzz/): the
# libFuzzer targets of the clang AddressSanitizer + UndefinedBehaviorSanitizer
# build (build/sanitize, scripts/sanitizers/build.sh), each run for
# DTR_FUZZ_SECONDS (default 60) from its seed corpus; prints the executions per
# target. A finding (crash, leak, sanitizer report, timeout) fails the run; its
# input is saved under build/sanitize/findings/<target>/: fix the parser and add
# that file to tests/fuzz/fixtures/<target>/, where every build's test suite
# replays it.
#   scripts/fuzz.sh [target...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/sanitizers/build.sh >/dev/null
seconds=${DTR_FUZZ_SECONDS:-60}
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for corpus in tests/fuzz/fixtures/*/; do targets+=("$(basename "$corpus")"); done
fi
here=$(pwd)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
failed=()
for t in "${targets[@]}"; do
  work="build/sanitize/fuzz_corpus/$t" findings="build/sanitize/findings/$t"
  mkdir -p "$work" "$findings"
  log="build/sanitize/fuzz_$t.log"
  # New inputs go to the working corpus; the seeds in the repo are only read.
  if "build/sanitize/tests/fuzz/dtr_fuzz_$t" "$work" "tests/fuzz/fixtures/$t" -max_total_time="$seconds" \
       -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 -artifact_prefix="$here/$findings/" \
       >"$log" 2>&1; then
    runs=$(grep -m1 "stat::number_of_executed_units" "$log" | awk '{print $2}')
    cov=$(grep -oE "cov: [0-9]+" "$log" | tail -1)
    echo "fuzz $t: ${runs:-?} executions in ${seconds} s, ${cov:-cov: ?}, corpus $(ls "$work" | wc -l) inputs, no finding"
  else
    echo "fuzz $t: FINDING, see $log and $findings/" >&2
    grep -m5 -E "ERROR|runtime error|SUMMARY" "$log" >&2 || tail -20 "$log" >&2
    failed+=("$t")
  fi
done
[[ ${#failed[@]} -eq 0 ]] || { echo "fuzz: findings in ${failed[*]}" >&2; exit 1; }
