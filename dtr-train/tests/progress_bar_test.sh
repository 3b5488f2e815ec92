#!/usr/bin/env bash
# --progress-bar auto under mpirun: Open MPI gives every rank's stdout a
# pseudo-terminal, so the rank always looks like it writes to a terminal; the bar
# (redrawn with "\r\033[K") must still reach only a real terminal. With default
# flags, mpirun's stdout a file or a pipe: progress lines only, no '\r' or escape
# in the log. mpirun run inside a pseudo-terminal (script(1), where installed):
# the bar is drawn, unless --progress-bar off or mpirun --output-filename (which
# copies the output to files too). --progress-bar on draws it into a file, as asked.
#   progress_bar_test.sh DTR_TRAIN OUT_DIR MPIEXEC [MPIRUN_FLAGS...]
set -uo pipefail
train=$1 out=$2 mpiexec=$3
shift 3
rm -rf "$out"
mkdir -p "$out"
failures=0
# --log-every 5 over 12 steps: bars at 8 of them where a bar is drawn.
run=("$mpiexec" "$@" -np 2 "$train" --model tiny --steps 12 --log-every 5 --global-batch 4 --eval-every 0
     --eval-batches 1 --sample-tokens 0 --no-final-checkpoint)

# check NAME LOG WANT_BAR [pty]: the run's log has its progress lines and a bar
# ("\033[K[#") or (no) no escape sequence and, unless written through a pty, no '\r'.
check() {
  local name=$1 log=$2 want_bar=$3 through=${4:-}
  local escapes carriage_returns
  escapes=$(grep -c $'\e' "$log")
  carriage_returns=$(tr -cd '\r' < "$log" | wc -c)
  if ! grep -q 'step 12/12 | loss' "$log"; then
    echo "FAIL ($name): no progress line for step 12; log:"; cat "$log"; failures=$((failures + 1))
  elif [[ $want_bar == yes ]] && ! grep -q $'\e\\[K\\[#' "$log"; then
    echo "FAIL ($name): expected the progress bar; log:"; cat -A "$log" | tail -20; failures=$((failures + 1))
  elif [[ $want_bar == no && $escapes -ne 0 ]]; then
    echo "FAIL ($name): $escapes lines with escape sequences, expected progress lines only:"
    cat -A "$log" | grep -F '^[' | head -5; failures=$((failures + 1))
  elif [[ $want_bar == no && $through != pty && $carriage_returns -ne 0 ]]; then
    echo "FAIL ($name): $carriage_returns carriage returns in the log, expected none"; failures=$((failures + 1))
  else
    echo "ok ($name): $([[ $want_bar == yes ]] && echo "bar drawn" || echo "progress lines only")"
  fi
}

# The default, as `scripts/quickstart.sh > log` runs it: mpirun's stdout is a file.
if ! "${run[@]}" --out "$out/file" > "$out/file.log" 2>&1; then
  echo "FAIL: the run to a file failed:"; cat "$out/file.log"; exit 1
fi
check "default, mpirun > file" "$out/file.log" no
# mpirun's stdout a pipe (| tee).
"${run[@]}" --out "$out/pipe" 2>&1 | cat > "$out/pipe.log"
check "default, mpirun | cat" "$out/pipe.log" no
# Asked for: the bar goes where it is told.
"${run[@]}" --progress-bar on --out "$out/on" > "$out/on.log" 2>&1
check "--progress-bar on, mpirun > file" "$out/on.log" yes

# mpirun in a pseudo-terminal, as in an interactive shell (the pty turns "\n" into
# "\r\n", so only escapes tell a bar there).
if script --version >/dev/null 2>&1; then
  in_terminal() {  # in_terminal LOG ARGS...: runs ARGS with stdout and stderr on a new pseudo-terminal
    local log=$1
    shift
    script -qec "$(printf '%q ' "$@")" /dev/null < /dev/null > "$log" 2>&1
  }
  in_terminal "$out/tty.log" "${run[@]}" --out "$out/tty"
  check "default, mpirun in a pseudo-terminal" "$out/tty.log" yes
  in_terminal "$out/tty_off.log" "${run[@]}" --progress-bar off --out "$out/tty_off"
  check "--progress-bar off, mpirun in a pseudo-terminal" "$out/tty_off.log" no pty
  in_terminal "$out/tty_files.log" "$mpiexec" "$@" --output-filename "$out/ranks" "${run[@]:$(($# + 1))}" \
    --out "$out/tty_files"
  check "default, mpirun --output-filename in a pseudo-terminal" "$out/tty_files.log" no pty
else
  echo "skipped the runs in a pseudo-terminal: no script(1) (util-linux)"
fi
exit $((failures > 0))
